"""Training: :func:`train` (``octlm train`` as a library call) and its options, :class:`TrainOptions`."""

__all__ = ["TrainOptions", "train"]


def __getattr__(name: str):
    # Lazily, so that importing one module of this package (device, options) does not import the command and what it
    # shows.
    if name == "train":
        from octlm.train.launch import train

        return train
    if name == "TrainOptions":
        from octlm.train.options import TrainOptions

        return TrainOptions
    raise AttributeError(f"module 'octlm.train' has no attribute {name!r}")
