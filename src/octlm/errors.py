"""Errors that reach the user as one clear line instead of a traceback."""


class OctlmError(Exception):
    """A problem with the user's input or files; the message says what and how to fix it."""


class DataError(OctlmError, ValueError):
    """The corpus cannot be used as given (missing, empty, binary, undecodable, too short)."""


class RunError(OctlmError):
    """A run folder is missing, incomplete or corrupted."""
