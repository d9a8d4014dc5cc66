"""Ctrl-C and SIGTERM during training: a request to stop after the step in flight."""

from __future__ import annotations

import signal
import threading


class StopSignals:
    """Turn Ctrl-C (SIGINT) and SIGTERM into a request to stop after the current step.

    The step in flight finishes, so the model and optimizer are never saved
    half-updated. In one process a second Ctrl-C stops at once (the last
    checkpoint on disk stays as it was); under torchrun, which forwards
    signals to every process, repeats only confirm the request. Handlers are
    installed only from the main thread and put back on exit.
    """

    def __init__(self, force_on_repeat: bool) -> None:
        self.requested = False
        self.force_on_repeat = force_on_repeat
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.requested and self.force_on_repeat and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


__all__ = ["StopSignals"]
