"""Ctrl-C, SIGTERM, SIGHUP and SIGUSR1 during training: a request to stop after the step in flight."""

from __future__ import annotations

import signal
import sys
import threading

#: Signals that end a command the way Ctrl-C does (``octlm train`` saves and says how to resume): SIGTERM
#: (``kill``, a scheduler's cancel, a container's stop), SIGHUP (the terminal or the ssh session closed) and
#: SIGUSR1 (what SLURM sends ahead of a job's time limit under ``--signal=USR1@SECONDS``). Python would die
#: of the last two at once, saving nothing and saying nothing. A platform without one leaves it out.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1") if hasattr(signal, name))


class _HungUpStream:
    """A standard stream whose terminal may have hung up: what it cannot write (a hung-up terminal answers EIO) is
    dropped."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def survive_hangup(signum: int) -> None:
    """After SIGHUP, let printing to a terminal that is gone fail quietly.

    A closed terminal or ssh session answers every later write with EIO;
    the stop that follows the signal must still save and end with its usual
    status, and its messages still reach a terminal that is there (a SIGHUP
    sent by hand) or a file the output was redirected to.
    """
    if signum == getattr(signal, "SIGHUP", None):
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, _HungUpStream):
                setattr(sys, name, _HungUpStream(stream))


class StopSignals:
    """Turn Ctrl-C (SIGINT) and the :data:`STOP_SIGNALS` into a request to stop after the current step.

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
        survive_hangup(signum)
        if self.requested and self.force_on_repeat and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, *STOP_SIGNALS):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


__all__ = ["STOP_SIGNALS", "StopSignals", "survive_hangup"]
