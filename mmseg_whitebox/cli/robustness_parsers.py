"""The parsers of the robustness tools, whose options are the fields of a
package function's options (``tools/noise_robustness.py``:
:class:`~mmseg_whitebox.robustness.NoiseSweepOptions`;
``tools/analysis_tools/test_corruption_robustness.py``:
:class:`~mmseg_whitebox.robustness.corruptions.CorruptionOptions`): a
flag per field (:func:`~.options.add_dataclass_args`) and the flags every
tool shares, nothing else. Here rather than in the tools so that the
tests check the parser the tool uses."""
from __future__ import annotations

import argparse

from mmseg_whitebox.robustness import NoiseSweepOptions
from mmseg_whitebox.robustness.corruptions import CorruptionOptions
from .options import (add_cfg_options_arg, add_checkpoint_check_args,
                      add_common_args, add_dataclass_args, add_launcher_args,
                      tool_parser)


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('config', help='config file path')
    parser.add_argument('checkpoint', help='checkpoint file')


def noise_sweep_parser(doc: str) -> argparse.ArgumentParser:
    """``config``, ``checkpoint``, the flags of :class:`NoiseSweepOptions`,
    the checkpoint checks' and the Runner's (``--work-dir``,
    ``--cfg-options``, ``--launcher``); ``doc``: the tool's help."""
    parser = tool_parser(doc)
    _model_args(parser)
    add_dataclass_args(parser, NoiseSweepOptions)
    add_checkpoint_check_args(parser, 'sweep')
    add_common_args(parser)
    return parser


def corruption_benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """``config``, ``checkpoint``, the flags of :class:`CorruptionOptions`
    (``--work-dir`` among them: its own default), the checkpoint checks',
    ``--cfg-options`` and the Runner's ``--launcher`` and ``--device``;
    ``doc``: the tool's help."""
    parser = tool_parser(doc)
    _model_args(parser)
    add_dataclass_args(parser, CorruptionOptions)
    add_checkpoint_check_args(parser)
    add_cfg_options_arg(parser)
    add_launcher_args(parser)
    return parser
