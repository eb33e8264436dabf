"""What the benchmarks share.

A benchmark declares what differs (a :class:`Benchmark`: its configs,
columns, baselines and timed calls) and a function that measures one
model at one size; the rest is here: models with random weights
(:func:`build_models`), sizes measured smallest first (a size predicted
not to fit skipped, :mod:`.memory`), every model at every size timed in
one set of interleaved rounds (:mod:`.timing`), ratios and a markdown
table (:mod:`.report`). :class:`BenchmarkOptions` and :func:`prepare_run`
are the tools' common options and set-up.
"""
from __future__ import annotations

import contextlib
import datetime
import glob
import os
import os.path as osp
import platform
from dataclasses import dataclass, field, replace
from statistics import median
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

import torch

from mmseg_whitebox.utils.device import auto_device
from mmseg_whitebox.utils.capabilities import dynamo_recompile_limit_key
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import InputError
from .memory import available_memory, frozen_heap, proc_field
from . import report as reporting
from .report import Baseline, Column, add_ratios, describe_row, results_table
from .timing import time_interleaved


#: the row name of a model compiled with ``torch.compile`` (``--compile``)
COMPILED = '{}+compile'
#: dynamo's graphs per function: one per size and mode of every model
RECOMPILE_LIMIT = 256

#: one size's rows, and the calls to time of each row that was not
#: skipped (:func:`row_key` -> kind -> call)
SizeRows = Tuple[List[Dict], Dict[str, Dict[str, Callable[[], object]]]]


@dataclass
class BenchmarkOptions:
    """What to measure, and how often."""
    repeats: int = 10
    warmup: int = 2
    max_seconds: Optional[float] = 30.0
    backward: bool = True
    flops: bool = True
    #: the autocast dtype (``'float16'``, ``'bfloat16'``), or None
    amp: Optional[str] = None
    seed: int = 0
    #: also time every model compiled (``torch.compile``)
    compile: bool = False


@dataclass(frozen=True)
class Benchmark:
    """What one benchmark declares.

    ``configs``: model name -> config glob under ``configs/`` with a
    ``{size}`` field, ``what`` names one (``{name}``, ``{size}``) and
    ``remedy`` says what to do when none matches; ``kinds``: the calls
    timed (``row['<kind>_ms']``); ``describe``: a row's progress line;
    ``notes``: a row's note column."""
    columns: Sequence[Column]
    baselines: Sequence[Baseline] = ()
    kinds: Sequence[str] = ()
    configs: Dict[str, str] = field(default_factory=dict)
    what: str = ''
    remedy: str = ''
    describe: Callable[[Dict], str] = describe_row
    notes: Callable[[Dict], List[str]] = lambda row: []

    def config(self, name: str, size: str, config_root: str) -> str:
        """The first config (sorted) of model ``name`` at ``size`` under
        ``config_root``; an :class:`InputError` if there is none."""
        pattern = self.configs[name].format(size=size)
        found = sorted(glob.glob(osp.join(config_root, pattern)))
        if not found:
            raise InputError(
                f'no config for {self.what.format(name=name, size=size)} '
                f'({pattern} under {config_root}); {self.remedy}')
        return found[0]

    def measure_size(self, models: Dict[str, Any],
                     measure: Callable[[str, Any, List[Dict]], Tuple],
                     history: Dict[str, List[Dict]]) -> SizeRows:
        """Every model's row at one size, and the calls to time:
        ``measure(name, model, its rows of the smaller sizes)`` gives
        ``(row, {kind: call})`` (the calls None when the size was skipped:
        the row then stays out of ``history``)."""
        rows, calls = [], {}
        for name, model in models.items():
            past = history.setdefault(name, [])
            row, row_calls = measure(name, model, past)
            rows.append(row)
            if row_calls is not None:
                calls[row_key(row)] = row_calls
                past.append(row)
        return rows, calls

    def measure_sizes(self, sizes: Sequence[Tuple[int, int]],
                      measure: Callable[[Tuple[int, int]], SizeRows],
                      options: BenchmarkOptions,
                      device: torch.device) -> List[Dict]:
        """``measure(size)`` at every size, smallest first (memory is
        predicted from the smaller sizes), then every model at every size
        timed in one set of interleaved rounds, kind after kind, into
        ``row['<kind>_ms']`` (the median) and ``row['<kind>_calls']``: a
        ratio between two sizes compares calls timed side by side, not
        two phases of the machine."""
        rows: List[Dict] = []
        calls: Dict[str, Dict[str, Callable[[], object]]] = {}
        with frozen_heap():
            for size in sorted(sizes, key=lambda s: s[0] * s[1]):
                print(f'== {size[0]}x{size[1]}', flush=True)
                size_rows, size_calls = measure(size)
                rows += size_rows
                calls.update(size_calls)
            print(f'== timing {len(calls)} model-size pairs side by side',
                  flush=True)
            for kind in self.kinds:
                fns = {key: fn[kind] for key, fn in calls.items()
                       if kind in fn}
                times = time_interleaved(fns, device, options.repeats,
                                         options.warmup, options.max_seconds)
                for row in rows:
                    t = times.get(row_key(row))
                    if t:
                        row[f'{kind}_ms'] = 1e3 * median(t)
                        row[f'{kind}_calls'] = len(t)
        for row in rows:
            print('  ' + self.describe(row), flush=True)
        return rows

    def with_compiled(self, names: Sequence[str],
                      keys: Sequence[str]) -> 'Benchmark':
        """This benchmark with each compiled row of ``names`` also given
        its ``keys`` as ratios to the same model eager (``*_vs_eager``)."""
        compiled = tuple(Baseline(name, tuple(keys), 'eager',
                                  only=COMPILED.format(name))
                         for name in names)
        return replace(self, baselines=tuple(self.baselines) + compiled)

    def add_ratios(self, rows: List[Dict]) -> None:
        """Every baseline's ratios, per size (:func:`.report.add_ratios`)."""
        for baseline in self.baselines:
            add_ratios(rows, baseline)

    def markdown_table(self, rows: List[Dict]) -> str:
        return results_table(rows, self.columns, self.notes)

    def run(self, out: str, sizes: Sequence[Tuple[int, int]],
            measure: Callable[[Tuple[int, int]], SizeRows],
            options: BenchmarkOptions, device: torch.device, setup: Dict,
            title: str, slope_keys: Sequence[str] = reporting.SLOPE_KEYS,
            **plot_keys: Sequence[str]) -> Dict:
        """A whole run after its models are built: every size measured
        and timed, the ratios, the slopes of ``slope_keys`` and the
        report files in ``out`` (:func:`.report.write_report`). Returns
        the report: ``setup``, ``results`` and ``slopes``."""
        rows = self.measure_sizes(sizes, measure, options, device)
        self.add_ratios(rows)
        report = dict(setup, results=rows,
                      slopes=reporting.slopes(rows, slope_keys))
        reporting.write_report(out, report, self.markdown_table(rows),
                               title, **plot_keys)
        return report


def is_compiled(name: str) -> bool:
    """Whether row ``name`` is a compiled model's (:data:`COMPILED`)."""
    return name.endswith(COMPILED.format(''))


def recompile_limit() -> Any:
    """Room for every size's and mode's graph (past its limit, dynamo
    runs a function eagerly)."""
    import torch._dynamo.config as config
    return config.patch(**{dynamo_recompile_limit_key(): RECOMPILE_LIMIT})


def row_key(row: Dict) -> str:
    """A row's model and size: the name its calls are timed under."""
    return f'{row["head"]} {row["size"]}'


def new_row(name: str, size: Tuple[int, int], **facts: Any) -> Dict:
    """The row of model ``name`` at image ``size``, status ``'ok'``."""
    return dict(head=name, size=f'{size[0]}x{size[1]}', **facts,
                status='ok')


def rep_grid_options(model_cfg: Any, rep_grid: Tuple[int, int]
                     ) -> Dict[str, Any]:
    """``--cfg-options`` that set every ``rep_grid`` (CBSA) and
    ``pool_size`` (MiTA) of ``model_cfg`` to ``rep_grid``: both need a
    token grid at least that large, so tiny inputs shrink them."""
    found: Dict[str, Any] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, (list, tuple)):  # per-layer settings
            for index, value in enumerate(node):
                walk(value, f'{key}.{index}')
        elif isinstance(node, dict):
            for name, value in node.items():
                if name in ('rep_grid', 'pool_size'):
                    found[f'{key}.{name}'] = tuple(rep_grid)
                else:
                    walk(value, f'{key}.{name}')

    walk(model_cfg, 'model')
    return found


def build_models(configs: Dict[str, str], device: torch.device, seed: int,
                 options: Optional[Dict[str, Any]] = None,
                 rep_grid: Optional[Tuple[int, int]] = None
                 ) -> Dict[str, torch.nn.Module]:
    """The segmentor of every ``name: config file`` (eval mode, random
    weights from ``seed``, nothing downloaded), ``options``
    (``--cfg-options`` keys) and ``rep_grid`` (:func:`rep_grid_options`)
    merged into each config."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from mmseg_whitebox.utils.logs import quiet_logging
    init_default_scope('mmseg')
    models = {}
    for name, path in configs.items():
        cfg = Config.fromfile(path)
        cfg.model.pretrained = None
        cfg.model.backbone.init_cfg = None
        if options:
            cfg.merge_from_dict(options)
        if rep_grid is not None:
            cfg.merge_from_dict(rep_grid_options(cfg.model, rep_grid))
        torch.manual_seed(seed)
        model = MODELS.build(cfg.model)
        with quiet_logging():  # not mmengine's per-parameter init report
            model.init_weights()
        model.cfg = cfg
        models[name] = model.to(device).eval()
    return models


def project_configs() -> str:
    """The project's ``configs/`` folder (the checkout's or the wheel's)."""
    from mmseg_whitebox.engine.model_index import resources_root
    root = resources_root()
    if root is None:
        raise InputError(
            "this installation has no configs/ folder (neither a checkout's "
            "nor a wheel's): reinstall the package, or give config_root")
    return osp.join(root, 'configs')


def prepare_run(device_name: Optional[str], threads: Optional[int],
                memory_limit_gb: Optional[float]
                ) -> Tuple[torch.device, Optional[int]]:
    """The device (None: :func:`~mmseg_whitebox.utils.device.auto_device`),
    with the CPU threads set, and the memory budget in bytes
    (``memory_limit_gb``, else 80% of what is available now)."""
    device = torch.device(auto_device(device_name))
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise InputError('--device cuda, but torch sees no CUDA device')
    if threads:
        torch.set_num_threads(threads)
    if memory_limit_gb:
        return device, int(memory_limit_gb * 2**30)
    avail = available_memory(device)
    return device, int(0.8 * avail) if avail else None


def machine(device: torch.device) -> Dict:
    """The facts of the machine a report was measured on."""
    facts = dict(date=datetime.datetime.now().isoformat(timespec='seconds'),
                 platform=platform.platform(),
                 python=platform.python_version(), torch=torch.__version__,
                 device=str(device),
                 cpu=(proc_field('model name', '/proc/cpuinfo')
                      or platform.processor() or platform.machine()),
                 cpu_count=os.cpu_count(), threads=torch.get_num_threads())
    if device.type == 'cuda':
        facts['gpu'] = torch.cuda.get_device_name(device)
    return facts


@contextlib.contextmanager
def start_report(out: str, device: torch.device, what: str,
                 amp: Optional[str]) -> Iterator[Dict]:
    """The report folder ``out``, locked for the block; prints
    :func:`machine_line` and gives the machine's facts."""
    with lock_folder(out, '--out'):
        facts = machine(device)
        print(machine_line(facts, what, amp))
        yield facts


def machine_line(facts: Dict, what: str, amp: Optional[str]) -> str:
    """One line naming the machine and what is benchmarked."""
    return (f'benchmark on {facts["cpu"]} ({facts["threads"]} threads), '
            f'{facts.get("gpu", "")} torch {facts["torch"]}, {what}'
            + (f', autocast {amp}' if amp else ''))
