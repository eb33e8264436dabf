"""The error every tool reports as one line, and its exit status; kept
apart from :mod:`.cli` so that the modules ``cli`` builds on can raise it."""

#: exit status of every tool on bad input (as argparse's own errors)
BAD_INPUT = 2


class ToolError(Exception):
    """Bad input to a tool: what was wrong and what to do about it.

    :func:`~mmseg_whitebox.utils.cli.run_tool` prints it as
    ``<tool>: error: <message>`` (argparse's format) and exits with status
    :data:`BAD_INPUT`, without a traceback.
    """
