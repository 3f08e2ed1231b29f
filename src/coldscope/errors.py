"""The one exception type the CLI turns into a one-line error and a non-zero exit."""


class ColdscopeError(Exception):
    """A user-facing error: bad input, a missing file, an engine that cannot be run.

    The message must read as one complete line; the CLI prints ``error: <message>`` and exits 2.
    """
