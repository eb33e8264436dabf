"""Helpers shared by the tests (import as ``from _helpers import ...``)."""
import contextlib
import json
import os
import os.path as osp
import signal
import subprocess
import sys
import tempfile
from typing import Any, Callable, Iterator, List, Tuple

import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from torch.utils._python_dispatch import TorchDispatchMode

from mmseg_whitebox.apis.demo_models import (DEMO_MODELS,
                                             MMSEG_ATTENTION_HEADS,
                                             command_line, data_options)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO_SEGMENTER = osp.join(
    REPO, 'configs', 'segmenter',
    'segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py')


def assert_same(a: Any, b: Any, path: str = 'state') -> None:
    """Bitwise equality of nested checkpoint-like data (dicts in the same
    key order, lists, tuples, tensors and arrays of the same dtype,
    mmengine's ``HistoryBuffer``, plain values); ``path`` names the first
    difference."""
    if isinstance(a, HistoryBuffer):
        assert isinstance(b, HistoryBuffer), path
        assert a.max_length == b.max_length, path
        for x, y in zip(a.data, b.data):
            np.testing.assert_array_equal(x, y)
        return
    assert type(a) is type(b) or (isinstance(a, tuple)
                                  and type(b) is tuple), (path, a, b)
    if isinstance(a, dict):
        assert list(a) == list(b), (path, list(a), list(b))
        for k in a:
            assert_same(a[k], b[k], f'{path}.{k}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f'{path}[{i}]')
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype, path
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b, (path, a, b)


class _CreatedTensors(TorchDispatchMode):
    """Records the shape and dtype of every tensor an aten op returns in
    new memory (not a view or in-place result of one of its inputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.created: List[Tuple[tuple, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in
                  list(args) + list((kwargs or {}).values())
                  if isinstance(a, torch.Tensor)}
        outputs = out if isinstance(out, (list, tuple)) else [out]
        for t in outputs:
            if isinstance(t, torch.Tensor) and \
                    t.untyped_storage().data_ptr() not in inputs:
                self.created.append((tuple(t.shape), t.dtype))
        return out


def created_tensors(fn: Callable[[], Any]
                    ) -> Tuple[Any, List[Tuple[tuple, torch.dtype]]]:
    """``(result, [(shape, dtype), ...])``: what ``fn`` returned and every
    tensor the torch ops it ran created in new memory (not views or
    in-place results) -- a structural check of what a code path
    allocates, independent of the machine."""
    with _CreatedTensors() as mode:
        result = fn()
    return result, mode.created


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default dtype inside the block (float64 comparisons)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def skip_without_cpu_autocast(dtype: torch.dtype) -> None:
    """Skip the calling test where this torch cannot autocast the CPU in
    ``dtype`` (torch 2.1, the legacy stack: bfloat16 only)."""
    import pytest
    from mmseg_whitebox.ops.precision import autocast_problem
    problem = autocast_problem('cpu', dtype)
    if problem:
        pytest.skip(problem)


def needs_onnx_export():
    """Skip mark for tests that export a graph, where this environment
    cannot (the legacy stack's torch 2.1 has no dynamo exporter)."""
    import pytest
    from mmseg_whitebox.deployment.onnx_export import export_problem
    problem = export_problem()
    return pytest.mark.skipif(problem is not None, reason=problem or '')


def run_in_session(args: List[str], env: dict,
                   timeout: float) -> Tuple[int, str]:
    """``args`` from the repository root in a session of its own, stdout
    and stderr together; on a timeout the whole process group (a launcher
    and its workers) is killed and the test fails with the output's
    tail. Returns (exit status, output)."""
    proc = subprocess.Popen(args, cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f'{args} timed out:\n{out[-4000:]}')
    return proc.returncode, out


class _ToolServer:
    """The interpreter that ``run_tool`` forks its tool runs from
    (``tests/_tool_server.py``: torch, mmengine, mmseg and this package
    imported once per pytest process instead of once per run)."""

    def __init__(self) -> None:
        self.proc = None

    def run(self, args: List[str], env: dict,
            timeout: float) -> subprocess.CompletedProcess:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, osp.join(REPO, 'tests', '_tool_server.py')],
                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True)
        with tempfile.TemporaryDirectory() as folder:
            out, err = osp.join(folder, 'out'), osp.join(folder, 'err')
            request = dict(args=args, cwd=REPO, env=env, stdout=out,
                           stderr=err, timeout=timeout)
            self.proc.stdin.write(json.dumps(request) + '\n')
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
            if not answer:
                raise RuntimeError('the tool server (tests/_tool_server.py) '
                                   'ended; its stderr is in the output')
            answer = json.loads(answer)
            with open(out, errors='replace') as f:
                stdout = f.read()
            with open(err, errors='replace') as f:
                stderr = f.read()
        if answer['timed_out']:
            raise subprocess.TimeoutExpired(args, timeout, stdout, stderr)
        return subprocess.CompletedProcess([sys.executable] + args,
                                           answer['returncode'], stdout,
                                           stderr)


_TOOL_SERVER = _ToolServer()


def run_tool(args: List[str], timeout: int = 600, check: bool = True,
             env: dict = None) -> subprocess.CompletedProcess:
    """Run ``python <args>`` from the repository root, as a user would
    (``env``: variables to set besides this process's). A script run in
    this process's environment is forked from the tool server (the same
    run, without the 7 s of imports); with extra variables (some are read
    only when an interpreter starts) a fresh interpreter runs it."""
    if env is None and args[0].endswith('.py'):
        proc = _TOOL_SERVER.run(
            args, dict(os.environ, PYTHONUNBUFFERED='1'), timeout)
    else:
        proc = subprocess.run([sys.executable] + args, cwd=REPO,
                              env=dict(os.environ, PYTHONUNBUFFERED='1',
                                       **(env or {})),
                              capture_output=True, text=True,
                              timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f'{" ".join(args)} failed ({proc.returncode}):\n'
            f'{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}')
    return proc


def small_run_options(data_root: str, iters: int, work_dir: str = None,
                      batch_size: int = 2) -> List[str]:
    """--cfg-options that shrink a demo config to a few iterations on a
    tiny dataset, with no dataloader worker processes."""
    opts = ['randomness.seed=0',
            f'train_cfg.max_iters={iters}',
            f'train_cfg.val_interval={iters}',
            # no warm-up: the LinearLR factor stays 1
            'param_scheduler.0.start_factor=1.0',
            'param_scheduler.0.end=1',
            'param_scheduler.1.begin=1',
            f'param_scheduler.1.end={iters}',
            f'default_hooks.checkpoint.interval={iters}',
            'default_hooks.logger.interval=1',
            f'train_dataloader.batch_size={batch_size}']
    opts += command_line(data_options(data_root))
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        opts += [f'{loader}.num_workers=0',
                 f'{loader}.persistent_workers=False']
    return opts


def labelled_batch(num: int = 2, size: int = 64, classes: int = 150
                   ) -> Tuple[torch.Tensor, list]:
    """``num`` random ``size``x``size`` images and their SegDataSamples
    with random labels (seed 0): a model's ``loss`` or ``predict`` input
    without a dataset."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(0)
    inputs = torch.randn(num, 3, size, size, generator=gen)
    samples = []
    for _ in range(num):
        sample = SegDataSample(metainfo=dict(
            img_shape=(size, size), pad_shape=(size, size),
            ori_shape=(size, size)))
        sample.gt_sem_seg = PixelData(data=torch.randint(
            0, classes, (1, size, size), generator=gen))
        samples.append(sample)
    return inputs, samples


def demo_configs() -> dict:
    """The demo models (name -> config path relative to the repository
    root), as ``make demo`` defines them, but mmseg's classic attention
    heads (``MMSEG_ATTENTION_HEADS``): the demo-wide tests pin the
    white-box and Segmenter heads (the parameters each one's attention
    selection holds, its groups, its training); mmseg's heads' attention
    is tested on mmseg's own configs (test_attention_registry.py,
    test_attention_sweeps.py), their demo configs in test_demo.py."""
    return {name: config for name, config in DEMO_MODELS.items()
            if name not in MMSEG_ATTENTION_HEADS}


class StubRunner:
    """What ``run_noise_sweep`` and ``run_corruption_benchmark`` use of the
    mmengine Runner they build, around a model built by hand (no config
    dump, no checkpoint loaded): for tests of what those functions do with
    an error raised inside them."""

    def __init__(self, model: torch.nn.Module, dataset: Any = ()) -> None:
        from types import SimpleNamespace
        self.model = model
        self.cfg = {}
        self.test_loop = SimpleNamespace(dataloader=SimpleNamespace(
            dataset=dataset))

    def register_hook(self, hook: Any) -> None:
        pass

    def load_or_resume(self) -> None:
        pass

    def call_hook(self, name: str) -> None:
        pass


def raised_by(action):
    """The exception ``action()`` raises (the error is the result)."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError('nothing raised')


#: ``aten::`` ops that are one scaled-dot-product backend each (what
#: ``F.scaled_dot_product_attention`` dispatches to), and its name
SDPA_BACKENDS = {
    '_scaled_dot_product_flash_attention_for_cpu': 'flash (CPU)',
    '_scaled_dot_product_flash_attention': 'flash',
    '_scaled_dot_product_efficient_attention': 'memory-efficient',
    '_scaled_dot_product_cudnn_attention': 'cudnn',
    '_scaled_dot_product_fused_attention_overrideable': 'fused (other)',
    '_scaled_dot_product_attention_math': 'math',
    '_scaled_dot_product_attention_math_for_mps': 'math',
}


def sdpa_backend(op_name: str):
    """The backend a profiler's ``aten::`` op is (:data:`SDPA_BACKENDS`),
    or None."""
    return SDPA_BACKENDS.get(op_name.split('::', 1)[-1])
