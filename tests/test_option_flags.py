"""Options declared once: a package function's options dataclass is the
flags of its tool (``mmseg_whitebox.cli.add_dataclass_args``), and the
dataclass comes back from the parsed flags (``options_from_args``)."""
import argparse
import dataclasses
import os.path as osp
from typing import List, Optional, Sequence

import pytest

from mmseg_whitebox.cli import add_dataclass_args, options_from_args
from mmseg_whitebox.cli.options import (add_models_arg, add_seed_arg,
                                        dataclass_flag)
from mmseg_whitebox.cli.robustness_parsers import (corruption_benchmark_parser,
                                                   noise_sweep_parser)
from mmseg_whitebox.robustness import NoiseSweepOptions
from mmseg_whitebox.robustness.corruptions import CorruptionOptions

from _helpers import REPO
from _tool_parsers import describe


@dataclasses.dataclass
class Example:
    sizes: Sequence[float] = dataclasses.field(
        default=(1.0, ), metadata=dict(help='sizes'))
    count: Optional[int] = dataclasses.field(
        default=None, metadata=dict(help='count'))
    kind: str = dataclasses.field(default='a', metadata=dict(
        help='kind', choices=('a', 'b')))
    names: Optional[List[str]] = dataclasses.field(
        default=None, metadata=dict(help='names', nargs='*'))
    fast: bool = dataclasses.field(default=False,
                                   metadata=dict(help='go fast'))
    checks: bool = dataclasses.field(default=True,
                                     metadata=dict(help='skip the checks'))
    secret: int = 0  # no help: no flag


def test_a_dataclass_becomes_flags_and_comes_back():
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, Example)
    flags = {a.dest: a.option_strings for a in parser._actions}
    assert flags == dict(help=['-h', '--help'], sizes=['--sizes'],
                         count=['--count'], kind=['--kind'],
                         names=['--names'], fast=['--fast'],
                         checks=['--no-checks'])
    assert options_from_args(Example, parser.parse_args([])) == Example()
    given = options_from_args(Example, parser.parse_args(
        ['--sizes', '2', '3.5', '--count', '4', '--kind', 'b', '--names',
         '--fast', '--no-checks']))
    assert given == Example(sizes=[2.0, 3.5], count=4, kind='b', names=[],
                            fast=True, checks=False)
    with pytest.raises(SystemExit):  # argparse: a choice and a type
        parser.parse_args(['--kind', 'c'])
    with pytest.raises(SystemExit):
        parser.parse_args(['--count', 'x'])
    excluded = argparse.ArgumentParser()
    add_dataclass_args(excluded, Example, exclude=('kind', 'fast'))
    assert {a.dest for a in excluded._actions} == {
        'help', 'sizes', 'count', 'names', 'checks'}


@dataclasses.dataclass
class Shared:
    seed: int = dataclasses.field(default=3, metadata=dict(help='a seed'))
    models: Sequence[str] = dataclasses.field(default=('a', ), metadata=dict(
        help='which', choices=('a', 'b')))


def test_a_field_named_as_a_shared_flag_is_made_by_its_builder():
    """``seed``, ``models`` ... (SHARED_FIELDS): the builder's flag, with
    the field's help, default and choices."""
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, Shared)
    reference = argparse.ArgumentParser()
    add_seed_arg(reference, 'a seed', 3)
    add_models_arg(reference, ('a', 'b'), ('a', ), 'which')
    assert describe(parser) == describe(reference)
    assert [a.help for a in parser._actions] == \
        [a.help for a in reference._actions]
    assert options_from_args(Shared, parser.parse_args([])) == Shared()
    assert options_from_args(Shared, parser.parse_args(
        ['--seed', '5', '--models', 'b'])) == Shared(seed=5, models=['b'])


@pytest.mark.parametrize('tool, make_parser, options, library_only, extra', [
    ('tools/noise_robustness.py', noise_sweep_parser, NoiseSweepOptions,
     {'progress'}, dict(local_rank=['--local_rank', '--local-rank'])),
    ('tools/analysis_tools/test_corruption_robustness.py',
     corruption_benchmark_parser, CorruptionOptions, set(),
     dict(local_rank=['--local_rank', '--local-rank'])),
])
def test_every_option_is_one_flag_of_the_tool(tool, make_parser, options,
                                              library_only, extra):
    """Each field of the options is declared once: the tool's parser has
    one flag per field, made from the field or (the Runner's and the
    checkpoint checks') shared by all tools under the field's name, and no
    flag of its own; parsed defaults are the library's."""
    with open(osp.join(REPO, tool)) as f:
        assert f'{make_parser.__name__}(__doc__).parse_args(argv)' in \
            f.read()
    parser = make_parser(__doc__)
    flags = {a.dest: a.option_strings for a in parser._actions
             if a.option_strings}
    assert flags == dict(
        {f.name: [dataclass_flag(f)] for f in dataclasses.fields(options)
         if f.name not in library_only}, help=['-h', '--help'], **extra)
    args = parser.parse_args(['config.py', 'ckpt.pth'])
    assert options_from_args(options, args) == options()
