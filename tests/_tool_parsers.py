"""Every tool's command-line options, read without importing a tool into
the test process.

Run as ``python tests/_tool_parsers.py TOOL [TOOL ...]``: each TOOL runs
as ``python TOOL --help`` would (``runpy``, ``__name__ == '__main__'``),
and is stopped when it hands its command line to its parser; the options
of that parser (:func:`describe`) are printed as one JSON object, tool ->
options (null for a tool that never parsed a command line).
:func:`describe` is also what the tests apply to a parser of their own.
"""
import argparse
import json
import runpy
import sys
from typing import Any, Dict, List, Optional


class _Parsing(BaseException):
    """Raised in place of parsing: carries the parser (a BaseException, so
    that a tool's own ``except Exception`` does not catch it)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _type_name(kind: Any) -> Optional[str]:
    if kind is None:
        return None
    return getattr(kind, '__name__', type(kind).__name__)


def describe(parser: argparse.ArgumentParser) -> List[Dict[str, Any]]:
    """One entry per argument of ``parser``: its flags (none for a
    positional), dest, nargs, metavar, choices, type and action class."""
    entries = []
    for action in parser._actions:
        metavar = action.metavar
        entries.append(dict(
            flags=list(action.option_strings), dest=action.dest,
            nargs=action.nargs,
            metavar=list(metavar) if isinstance(metavar, tuple) else metavar,
            choices=None if action.choices is None else [
                str(c) for c in action.choices],
            type=_type_name(action.type),
            action=type(action).__name__))
    return entries


def read_parser(tool: str) -> Optional[List[Dict[str, Any]]]:
    """The options of the parser ``tool`` hands its command line to."""

    def stop(self: argparse.ArgumentParser, *args: Any,
             **kwargs: Any) -> None:
        raise _Parsing(self)

    saved_argv, saved_parse = sys.argv, argparse.ArgumentParser.parse_args
    sys.argv = [tool, '--help']
    argparse.ArgumentParser.parse_args = stop
    try:
        runpy.run_path(tool, run_name='__main__')
    except _Parsing as parsing:
        return describe(parsing.parser)
    finally:
        sys.argv = saved_argv
        argparse.ArgumentParser.parse_args = saved_parse
    return None


if __name__ == '__main__':
    print(json.dumps({tool: read_parser(tool) for tool in sys.argv[1:]}))
