"""The one exception type the CLI turns into a clear message (no traceback)."""


class HarnessError(Exception):
    """A problem the user can fix: bad input, a missing binary, an unreachable server."""
