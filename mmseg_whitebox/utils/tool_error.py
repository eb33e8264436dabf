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


class SettingError(ToolError, ValueError):
    """A setting that cannot be used (an option of a tool, or the argument
    of a package function behind it); the message names the option. (A
    ``ValueError`` too, for callers of the package that catch those.)"""


class OutputExistsError(ToolError, FileExistsError):
    """An output folder already holds results that a run would write over
    (without ``--resume``)."""


class MissingInputError(ToolError, FileNotFoundError):
    """An input a tool was given does not exist or is not what it should
    be (e.g. a folder without the results it should hold)."""


class MissingExtraError(ToolError, ImportError):
    """A feature needs an optional package that is not installed; the
    message says how to install it."""
