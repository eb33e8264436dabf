"""The errors every tool reports as one line, and their exit statuses
(kept apart from :mod:`.cli` so that what ``cli`` builds on can raise
them). A user's mistake (:class:`ToolError`) is one line and
:data:`BAD_INPUT`; anything else is a bug, :data:`INTERNAL_ERROR` with its
traceback; a result failing the tool's own check
(:class:`CheckFailedError`) is one line and :data:`INTERNAL_ERROR`.
"""

#: exit status of every tool on bad input (as argparse's own errors)
BAD_INPUT = 2
#: exit status of a failure that is not the user's: a bug, or a result
#: that failed its check
INTERNAL_ERROR = 1


class ToolError(Exception):
    """Bad input to a tool: what was wrong and what to do about it, printed
    as ``<tool>: error: <message>`` (argparse's format)."""


class InputError(ToolError, ValueError):
    """Bad input found by a function of the package where it checks its
    arguments or reads a file's content: a ``ValueError`` to callers of
    the package, a :class:`ToolError` to the tools. Raised only at such a
    check, so that a ``ValueError`` from anywhere else stays a bug."""


class CheckFailedError(Exception):
    """A tool did its work and the result failed the tool's own check (an
    exported graph that disagrees with PyTorch): reported as
    ``<tool>: check failed: <message>`` with exit status
    :data:`INTERNAL_ERROR`; the message says where the result was kept."""
