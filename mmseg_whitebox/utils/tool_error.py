"""The error every tool reports as one line, and its exit status; kept
apart from :mod:`.cli` so that the modules ``cli`` builds on can raise it."""

#: exit status of every tool on bad input (as argparse's own errors)
BAD_INPUT = 2


class ToolError(Exception):
    """Bad input to a tool: what was wrong and what to do about it.

    :func:`~mmseg_whitebox.cli.run_tool` prints it as
    ``<tool>: error: <message>`` (argparse's format) and exits with status
    :data:`BAD_INPUT`, without a traceback.
    """


class BadFileError(ToolError, ValueError):
    """A file that cannot be read as what it should be (truncated, empty,
    another format); the message names the file and what to do. (A
    ``ValueError`` too, for callers of the package that catch those.)"""


class OverwriteError(ToolError, ValueError):
    """A tool was asked to write over one of its own inputs."""
