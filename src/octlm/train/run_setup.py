"""The first phase of a run: its folder, made (or found and locked), its prepared corpus and its ``config.json``.

:class:`RunFolderPhase` is the part of :class:`octlm.train.trainer.Trainer`
that deals with where the run lives; the trainer's ``setup`` calls it first.
It reads the trainer's ``opts``, ``group``, ``report``, ``resume``,
``max_steps`` and ``changes``, and sets ``folder``, ``lock``, ``ckpt``,
``data`` and ``digests``.
"""

from __future__ import annotations

from pathlib import Path

from octlm.data.tokens import count_blocks
from octlm.errors import RunError
from octlm.model import DecoderConfig
from octlm.run.folder import RunFolder
from octlm.run.load import check_scheme_found
from octlm.run.outputs import check_out_spares
from octlm.train.checkpoint import CHECKPOINT, check_digests, config_digest, load_checkpoint, run_digests
from octlm.train.corpus import open_corpus, prepare_corpus
from octlm.train.init_from import config_record
from octlm.train.resumable import check_resumable, resume_line


class RunFolderPhase:
    """Opening a run's folder and writing its config (a mixin of the Trainer; see the module docstring)."""

    def _open_folder(self) -> None:
        # Made once, by rank 0 (staged, so bad input leaves nothing behind); read by everyone.
        opts, group, report = self.opts, self.group, self.report
        if self.resume is None:

            def prepare() -> Path:
                target = RunFolder.new(opts.out)
                inputs = [("--text", text) for text in opts.text or []] + [("--init-from", opts.init_from)]
                check_out_spares(target.path, "--out", inputs)
                target.check_new_run(opts.overwrite)
                with target.staged() as staging:
                    corpus = prepare_corpus(opts, RunFolder(staging), report)
                    # Written with the corpus, so whenever training stops, the folder that appears can be resumed.
                    RunFolder(staging).write_config(
                        opts.model_config(corpus.tokenizer.vocab_size, corpus.tokenizer.eot_id),
                        self._config_record(target),
                    )
                # Named once it exists: bad input leaves no folder to name. Ctrl-C from here on says how to go on.
                self.folder = target
                report.event("run", f"run folder: {target}", run_dir=str(target))
                return target.path

            path = group.run_on_main(prepare)
            self.folder = RunFolder(group.gather(str(path) if group.is_main else None)[0])
            self.lock = self.folder.lock() if group.is_main else None
        else:
            self.folder = RunFolder(self.resume)
            self.lock = self.folder.lock() if group.is_main else None
            checkpoint = self.folder.path / CHECKPOINT
            if checkpoint.exists() or self.folder.weights_path.exists():
                self.ckpt = load_checkpoint(checkpoint)
            else:
                # Stopped before its first checkpoint: the prepared corpus and config are all
                # there is, and all a step-0 start needs (it is what a fresh run does next).
                report.warn(
                    f"{self.folder} stopped before its first checkpoint; "
                    "starting it again from step 0 on its prepared corpus"
                )
        self.data = open_corpus(self.folder)
        global_blocks = count_blocks(len(self.data.train), opts.model.context_length)
        if opts.batch_size * group.world_size > global_blocks:
            report.warn(
                f"a step takes {opts.batch_size * group.world_size} blocks but the training text holds only "
                f"{global_blocks}; every step repeats blocks (lower --batch-size or give more text)"
            )

    def _config_record(self, folder: RunFolder) -> dict:
        return {
            **self.opts.train_section(),
            "max_steps": self.max_steps,
            "out": str(folder),
            **config_record(self.opts),
        }

    def _write_config(self, config: DecoderConfig) -> None:
        folder = self.folder
        self.group.run_on_main(lambda: folder.write_config(config, self._config_record(folder)))

    def _fresh_config(self) -> DecoderConfig:
        folder, group = self.folder, self.group
        config = self.opts.model_config(self.data.tokenizer.vocab_size, self.data.tokenizer.eot_id)
        self._write_config(config)
        stored = folder.read_config()
        known = {e["file"]: e["sha256"] for e in self.data.manifest["tokens"].values()}
        digests = group.run_on_main(lambda: run_digests(folder.path, stored, known))
        self.digests = group.gather(digests)[0]
        return config

    def _resumed_config(self) -> DecoderConfig:
        folder, ckpt = self.folder, self.ckpt
        stored = folder.read_config()
        # Each process checks the files it is about to read.
        check_digests(ckpt.path, ckpt.state["digests"], run_digests(folder.path, stored))
        check_scheme_found(folder, stored)
        try:
            config = DecoderConfig.from_dict(stored["model"])
        except (TypeError, ValueError) as err:
            raise RunError(f"{folder.config_path}: invalid model config: {err}") from None
        note = check_resumable(
            self.ckpt.state, self.ckpt.step, self.opts, self.group.world_size, self.max_steps, self.folder
        )
        if note:
            self.changes.append(note)
        self._write_config(config)
        # The rewrite may add options this octlm knows and the run's did not (at their
        # defaults); later checkpoints record the config as it now is.
        self.digests = {**ckpt.state["digests"], "config.json": config_digest(folder.read_config())}
        line = resume_line(ckpt.state, ckpt.step, self.opts.time_budget, self.max_steps, folder)
        self.report.event("resume", line, run_dir=str(folder), step=ckpt.step)
        for change in self.changes:
            self.report.warn(f"{change}; the result will differ from an uninterrupted run")
        return config


__all__ = ["RunFolderPhase"]
