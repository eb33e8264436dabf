"""One flag vocabulary across every tool (docs/tools.md): each idea has one
spelling, made by one builder of ``mmseg_whitebox.cli.options``. The
tools' parsers are read in a subprocess (tests/_tool_parsers.py), so no
tool is imported here; where a shared flag is declared is read from the
source text of tools/ and mmseg_whitebox/."""
import argparse
import dataclasses
import glob
import json
import os.path as osp
import re
from typing import Any, Dict, List

import pytest

from mmseg_whitebox.apis.demo import DemoOptions
from mmseg_whitebox.cli.options import (ARCHS, SHARED_FIELDS, add_amp_args,
                                        add_arch_arg, add_data_root_arg,
                                        add_json_arg, add_labels_arg,
                                        add_launcher_args,
                                        add_measurement_args,
                                        add_memory_limit_arg, add_models_arg,
                                        add_num_images_arg, add_out_arg,
                                        add_out_file_arg, add_seed_arg,
                                        add_shape_arg, add_shapes_arg,
                                        add_sigmas_arg, add_threads_arg,
                                        add_title_arg, dataclass_flag)
from mmseg_whitebox.commands import COMMANDS
from mmseg_whitebox.robustness import NoiseSweepOptions
from mmseg_whitebox.robustness.corruptions import CorruptionOptions
from mmseg_whitebox.utils.amp import AMP_DTYPES

from _helpers import REPO, run_tool
from _tool_parsers import describe

#: other spellings of the vocabulary's ideas, refused as flags
OTHER_SPELLINGS = {
    '--out-dir': '--out DIR', '--output': '--out DIR',
    '--image-size': '--shape', '--size': '--shape or --arch',
    '--sizes': '--shapes', '--encoder': '--arch',
    '--memory-limit': '--memory-limit-gb', '--seeds': '--draws',
    '--data': '--data-root', '--data-dir': '--data-root',
    '--images': '--num-images', '--name': '--label or --title',
    '--config': 'a positional CONFIG', '--checkpoint':
    'a positional CHECKPOINT', '--json-out': '--json', '--fp16': '--amp',
    '--bf16': '--amp --amp-dtype bfloat16', '--num-threads': '--threads',
    '--heads': '--models', '--encoders': '--models',
}
#: flags that end like another spelling but mean something else
ALLOWED = {'--work-dir', '--show-dir', '--out-file', '--out-config',
           '--size-jitter'}
#: positional arguments that are a data or output folder in disguise
FOLDER_POSITIONALS = {'out', 'out_dir', 'data', 'data_dir', 'data_root'}
#: flag -> the type its value must have
TYPES = {'--draws': 'int', '--seed': 'int', '--num-images': 'int',
         '--threads': 'int', '--memory-limit-gb': 'float'}


def violations(options: List[Dict[str, Any]]) -> List[str]:
    """What in one parser's options (tests/_tool_parsers.describe) is not
    the vocabulary of docs/tools.md."""
    found = []
    by_flag = {flag: o for o in options for flag in o['flags']}
    for o in options:
        if not o['flags'] and o['dest'] in FOLDER_POSITIONALS:
            found.append(f'positional {o["dest"]}: use --out DIR or '
                         '--data-root DIR')
    for flag, o in by_flag.items():
        if flag in ALLOWED or not flag.startswith('--'):
            continue
        if flag in OTHER_SPELLINGS:
            found.append(f'{flag}: spell it {OTHER_SPELLINGS[flag]}')
        elif re.search(r'-sizes?$|seeds|-dir$', flag) or \
                flag.startswith('--out-'):
            found.append(f'{flag}: another spelling of a vocabulary idea '
                         '(--shape(s), --draws, --out, --out-file)')
        if flag == '--out' and o['metavar'] != 'DIR':
            found.append('--out: a folder (add_out_arg, metavar DIR); a '
                         'file is --out-file')
        if flag == '--out-file' and o['metavar'] != 'FILE':
            found.append('--out-file: add_out_file_arg (metavar FILE)')
        if flag == '--amp' and o['nargs'] != 0:
            found.append('--amp: a switch; the dtype is --amp-dtype')
        if flag == '--amp-dtype' and o['choices'] != list(AMP_DTYPES):
            found.append(f'--amp-dtype: choices {list(AMP_DTYPES)}')
        if flag.endswith('-shape') and o['action'] != 'ShapeAction':
            found.append(f'{flag}: one size H [W] (add_shape_arg)')
        if flag.endswith('-shapes') and o['type'] != 'shape':
            found.append(f'{flag}: a list of sizes H or HxW '
                         '(add_shapes_arg)')
        if flag == '--arch' and not set(o['choices'] or ['?']) <= set(ARCHS):
            found.append(f'--arch: model sizes among {ARCHS}')
        if flag in TYPES and o['type'] != TYPES[flag]:
            found.append(f'{flag}: takes {TYPES[flag]} values')
        if flag in ('--label', '--title') and o['nargs'] is not None:
            found.append(f'{flag}: one text (several inputs: --labels)')
    if ('--amp' in by_flag) != ('--amp-dtype' in by_flag):
        found.append('--amp and --amp-dtype come together (add_amp_args)')
    return sorted(set(found))


def tools() -> List[str]:
    """Every script of tools/ (relative to the repository root)."""
    return sorted(osp.relpath(p, REPO) for p in glob.glob(
        osp.join(REPO, 'tools', '**', '*.py'), recursive=True)
        if not osp.basename(p).startswith('_'))


@pytest.fixture(scope='module')
def tool_options() -> Dict[str, Any]:
    proc = run_tool(['tests/_tool_parsers.py'] + tools())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_tool_speaks_the_vocabulary(tool_options):
    assert set(tool_options) == set(tools())
    unread = [t for t, options in tool_options.items() if options is None]
    assert not unread, f'never parsed a command line: {unread}'
    found = {t: violations(o) for t, o in tool_options.items()}
    assert {t: v for t, v in found.items() if v} == {}


def test_the_commands_run_these_tools(tool_options):
    """``python -m mmseg_whitebox`` and the console scripts pass their
    arguments to the tools unchanged: checking the tools checks them."""
    assert {osp.join('tools', s) for s in COMMANDS.values()} <= \
        set(tool_options)


def vocabulary_parser() -> argparse.ArgumentParser:
    """A parser with every idea of the vocabulary, made by its builders."""
    p = argparse.ArgumentParser()
    p.add_argument('config')
    p.add_argument('checkpoint')
    add_out_arg(p, 'results')
    add_out_file_arg(p, 'one file')
    add_threads_arg(p)
    add_arch_arg(p)
    add_data_root_arg(p, 'data')
    add_num_images_arg(p, 2, 'images')
    add_memory_limit_arg(p, 'memory')
    add_amp_args(p, 'run')
    add_shape_arg(p, 'size')
    add_shapes_arg(p, 'sizes', flag='--check-shapes')
    add_labels_arg(p)
    add_models_arg(p, ['a', 'b'], ['a'], 'models')
    add_seed_arg(p, 'seed')
    add_sigmas_arg(p, 'sigmas')
    add_title_arg(p, 'title')
    add_json_arg(p, 'report')
    add_launcher_args(p)
    p.add_argument('--draws', type=int)
    p.add_argument('--label')
    return p


def test_the_builders_make_the_vocabulary():
    assert violations(describe(vocabulary_parser())) == []
    bench = argparse.ArgumentParser()
    add_measurement_args(bench, 'models', repeats=1, warmup=0,
                         max_seconds=1.0)
    assert violations(describe(bench)) == []


@pytest.mark.parametrize('flag, kwargs, words', [
    ('--out-dir', {}, '--out-dir: spell it --out DIR'),
    ('--image-size', dict(nargs=2, type=int), '--image-size: spell it'),
    ('--memory-limit', dict(type=float), '--memory-limit: spell it'),
    ('--size', dict(choices=['t', 's']), '--size: spell it'),
    ('--seeds', dict(type=int), '--seeds: spell it --draws'),
    ('--data-dir', {}, '--data-dir: spell it --data-root'),
    ('--images', dict(type=int), '--images: spell it --num-images'),
    ('--name', {}, '--name: spell it --label or --title'),
    ('--config', {}, '--config: spell it a positional CONFIG'),
    ('--out', dict(help='the .onnx file'), '--out: a folder'),
    ('--amp', dict(choices=['bf16', 'fp16']), '--amp: a switch'),
    ('--flops-sizes', {}, '--flops-sizes: another spelling'),
    ('--agreement-shape', dict(nargs=2, type=int),
     '--agreement-shape: one size H [W]'),
    ('--shapes', dict(nargs='+'), '--shapes: a list of sizes'),
    ('--draws', {}, '--draws: takes int values'),
    ('--arch', dict(choices=['small', 'base']), '--arch: model sizes'),
    ('--title', dict(nargs='+'), '--title: one text'),
    ('--heads', dict(nargs='+'), '--heads: spell it --models'),
    ('--encoders', dict(nargs='+'), '--encoders: spell it --models'),
])
def test_another_spelling_is_caught(flag, kwargs, words):
    """The check fails on each spelling the vocabulary replaced: the
    parser of the builders with one flag made another way."""
    parser = vocabulary_parser()
    keep = [a for a in parser._actions if flag not in a.option_strings]
    parser = argparse.ArgumentParser(add_help=False)
    for action in keep:
        parser._add_action(action)
    parser.add_argument(flag, **kwargs)
    found = violations(describe(parser))
    assert any(words in v for v in found), found


def test_a_folder_positional_and_a_lone_amp_dtype_are_caught():
    parser = argparse.ArgumentParser()
    parser.add_argument('out_dir')
    parser.add_argument('--amp-dtype', choices=AMP_DTYPES)
    assert violations(describe(parser)) == [
        '--amp and --amp-dtype come together (add_amp_args)',
        'positional out_dir: use --out DIR or --data-root DIR']


# ------------------------------------------- shared ideas, declared once
#: the flags several tools take, each declared by one builder of
#: mmseg_whitebox/cli/options.py and nowhere else
SHARED = ('--models', '--seed', '--title', '--sigmas', '--json', '--amp',
          '--amp-dtype', '--device', '--launcher')
OPTIONS_MODULE = osp.join('mmseg_whitebox', 'cli', 'options.py')
#: a call whose first arguments are flags: add_argument('--seed', ...),
#: add('-s', '--seed', ...)
DECLARATION = re.compile(
    r"""\w\(\s*(?:['"]-[\w-]*['"]\s*,\s*)*['"](--[\w-]+)['"]\s*[,)]""")
#: the options dataclasses whose fields are flags (add_dataclass_args)
OPTION_CLASSES = (NoiseSweepOptions, CorruptionOptions, DemoOptions)


def declared(text: str, name: str) -> List[str]:
    """``'name:line: --flag'`` for each shared flag the source ``text``
    declares."""
    return [f'{name}:{text[:m.start()].count(chr(10)) + 1}: {m.group(1)}'
            for m in DECLARATION.finditer(text) if m.group(1) in SHARED]


def source_files() -> List[str]:
    """Every Python file of tools/ and mmseg_whitebox/ (relative)."""
    return sorted(osp.relpath(p, REPO) for folder in ('tools',
                                                      'mmseg_whitebox')
                  for p in glob.glob(osp.join(REPO, folder, '**', '*.py'),
                                     recursive=True))


def test_each_shared_flag_is_declared_once_by_its_builder():
    """Every tool and package parser takes ``--seed``, ``--device`` ...
    from the builders of cli/options.py: the source of tools/ and
    mmseg_whitebox/ declares each shared flag once, there, and an options
    field named as one is made by its builder (SHARED_FIELDS)."""
    found = []
    for name in source_files():
        with open(osp.join(REPO, name)) as f:
            found += declared(f.read(), name)
    outside = [d for d in found if not d.startswith(OPTIONS_MODULE + ':')]
    assert outside == []
    flags = [d.rsplit(' ', 1)[1] for d in found]
    assert sorted(flags) == sorted(SHARED), found
    fields = [f'{cls.__name__}.{f.name}' for cls in OPTION_CLASSES
              for f in dataclasses.fields(cls)
              if 'help' in f.metadata and dataclass_flag(f) in SHARED
              and f.name not in SHARED_FIELDS]
    assert fields == []
    used = set()
    for name in source_files():
        with open(osp.join(REPO, name)) as f:
            used |= set(re.findall(r'add_dataclass_args\(\w+, (\w+)',
                                   f.read()))
    assert used == {cls.__name__ for cls in OPTION_CLASSES}


def test_a_declaration_outside_the_builders_is_found():
    text = ("p.add_argument('--title', help='x')\n"
            "add('-s', '--seed', type=int)\n"
            "p.add_argument(\n    '--launcher', choices=['none'])\n"
            "raise InputError('--seed must be >= 0')\n"
            "for flag in (('--models', names), ):\n")
    assert declared(text, 'tool.py') == [
        'tool.py:1: --title', 'tool.py:2: --seed', 'tool.py:3: --launcher']
