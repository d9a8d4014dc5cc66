"""Ctrl-C, SIGTERM, SIGHUP and SIGUSR1 during training: a request to stop after the step in flight."""

from __future__ import annotations

import errno
import signal
import sys
import threading

#: Signals that end a command the way Ctrl-C does (``octlm train`` saves and says how to resume): SIGTERM
#: (``kill``, a scheduler's cancel, a container's stop), SIGHUP (the terminal or the ssh session closed) and
#: SIGUSR1 (what SLURM sends ahead of a job's time limit under ``--signal=USR1@SECONDS``). Python would die
#: of the last two at once, saving nothing and saying nothing. A platform without one leaves it out.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1") if hasattr(signal, name))


class _HungUpStream:
    """A standard stream whose terminal may hang up: a write the terminal answers with EIO (it is gone) is dropped, and
    after SIGHUP (``hung_up``) any write that fails is."""

    def __init__(self, stream, hung_up: bool) -> None:
        self._stream, self.hung_up = stream, hung_up

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            if self.hung_up or err.errno == errno.EIO:
                return len(text)
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            if not (self.hung_up or err.errno == errno.EIO):
                raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _guard_streams(hung_up: bool) -> dict[str, object]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in :class:`_HungUpStream` (marking a wrapped one ``hung_up`` when
    asked); the streams replaced, by name."""
    replaced = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _HungUpStream):
            stream.hung_up = stream.hung_up or hung_up
        elif stream is not None:
            replaced[name] = stream
            setattr(sys, name, _HungUpStream(stream, hung_up))
    return replaced


def survive_hangup(signum: int) -> None:
    """After SIGHUP, let printing to a terminal that is gone fail quietly.

    A closed terminal or ssh session answers every later write with EIO;
    the stop that follows the signal must still save and end with its usual
    status, and its messages still reach a terminal that is there (a SIGHUP
    sent by hand) or a file the output was redirected to.
    """
    if signum == getattr(signal, "SIGHUP", None):
        _guard_streams(hung_up=True)


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
        self._streams: dict[str, object] = {}

    def _handle(self, signum, frame) -> None:
        survive_hangup(signum)
        if self.requested and self.force_on_repeat and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, *STOP_SIGNALS):
                self._previous[signum] = signal.signal(signum, self._handle)
            # A terminal closing mid-write answers EIO before the SIGHUP handler has run: that write must not end
            # the run with an error instead of the stop the signal asks for.
            self._streams = _guard_streams(hung_up=False)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        for name, stream in self._streams.items():
            current = getattr(sys, name)
            if isinstance(current, _HungUpStream) and current._stream is stream and not current.hung_up:
                setattr(sys, name, stream)  # after a hangup the guard stays, for the messages still to come


__all__ = ["STOP_SIGNALS", "StopSignals", "survive_hangup"]
