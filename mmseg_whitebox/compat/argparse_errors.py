"""The parser-error fix of :mod:`mmseg_whitebox.compat`, applied by
``run_tool`` while a tool parses its command line where
``MMSEG_WHITEBOX_ERROR_FILE`` is set (Python 3.11's argparse checked).

*What it patches.* ``argparse.ArgumentParser.error``, inside
:func:`parser_errors_reported_to` only.

*Why.* argparse reports a usage error by calling the parser's ``error``,
which prints and exits with status 2; there is no other place to see
the message (``exit_on_error=False`` still exits for a missing required
argument). The launch scripts (``tools/dist_*.sh``) need every rank's
line of a user's mistake, argparse's too, in one file.

*What it does.* Every parser's ``error(message)`` first passes
``'<prog>: error: <message>'`` to the given function, then does what it
did.
"""
from __future__ import annotations

import argparse
import contextlib
from typing import Callable, Iterator


@contextlib.contextmanager
def parser_errors_reported_to(record: Callable[[str], None]
                              ) -> Iterator[None]:
    """Inside the block, every argparse usage error's line is passed to
    ``record`` before argparse prints it and exits."""
    original = argparse.ArgumentParser.error

    def error(parser: argparse.ArgumentParser, message: str) -> None:
        record(f'{parser.prog}: error: {message}')
        original(parser, message)

    argparse.ArgumentParser.error = error  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original  # type: ignore
