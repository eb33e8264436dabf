"""Shared fixtures. Importing mmseg_whitebox first applies the compat layer
and registers every module, as the tools do."""
import functools
import os

import pytest
import torch
import torch._inductor.config as inductor_config

import mmseg_whitebox  # noqa: F401
from _helpers import DEMO_SEGMENTER

if os.environ.get('PYTEST_XDIST_WORKER'):
    # one of several pytest workers (make test: one per core): one torch
    # thread each, here and in the tools the tests start, so that the
    # workers share the cores instead of oversubscribing them
    os.environ['OMP_NUM_THREADS'] = '1'
    torch.set_num_threads(1)
    # and inductor compiles its C++ kernels in the process, not in a pool
    # of compile workers (each an interpreter importing torch)
    os.environ.setdefault('TORCHINDUCTOR_COMPILE_THREADS', '1')
    inductor_config.compile_threads = int(
        os.environ['TORCHINDUCTOR_COMPILE_THREADS'])
# inductor's C++ kernels unvectorised, here and in the tools the tests
# start (torch 2.1's tools excepted: it does not read the variable): the
# same graphs and the same code of this project compiled, in two thirds
# of the time on a CPU. The compiled tests check this project's
# compilation, not inductor's vectoriser; set the variable to 1 to
# include it.
os.environ.setdefault('TORCHINDUCTOR_VEC_ISA_OK', '0')
inductor_config.cpp.vec_isa_ok = os.environ['TORCHINDUCTOR_VEC_ISA_OK'] == '1'


def pytest_addoption(parser):
    parser.addoption('--gpu-out', metavar='DIR', default=None,
                     help='write the GPU smoke check\'s table to DIR '
                     '(gpu_smoke.md, gpu_smoke.json, ddp.log; make '
                     'gpu-check, tests/gpu/)')


def pytest_collection_modifyitems(items):
    """The tests marked ``slow`` first, in their order: the workers then
    share out the short ones at the end, instead of one running a long
    test alone while the other is idle."""
    items.sort(key=lambda item: item.get_closest_marker('slow') is None)


@pytest.fixture
def one_thread():
    """One intra-op thread inside the test (restored after it): small CPU
    computations run fastest, and steadiest on a shared machine, so."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def eager_compile(monkeypatch):
    """``torch.compile`` with dynamo's ``eager`` backend inside the test:
    the same graphs captured, no code generated (inductor's runs are
    tests/test_compile.py's)."""
    monkeypatch.setattr(torch, 'compile', functools.partial(
        torch.compile, backend='eager'))


@pytest.fixture(scope='session')
def tiny_ade(tmp_path_factory) -> str:
    """A tiny synthetic ADE20K-layout dataset (appearance variant)."""
    from mmseg_whitebox.datasets.synthetic_ade20k import \
        generate_synthetic_ade20k
    out = tmp_path_factory.mktemp('tiny_ade')
    return generate_synthetic_ade20k(
        str(out), num_train=8, num_val=3, image_size=(96, 112), seed=1)


@pytest.fixture(scope='session')
def tiny_checkpoint(tiny_ade, tmp_path_factory):
    """``tiny_checkpoint(config)``: a checkpoint of ``config`` trained for 4
    iterations on ``tiny_ade`` with tools/train.py (once per config)."""
    from _helpers import run_tool, small_run_options
    cache = {}

    def get(config: str) -> str:
        if config not in cache:
            work = tmp_path_factory.mktemp('ckpt')
            run_tool(['tools/train.py', config, '--work-dir', str(work),
                      '--cfg-options'] +
                     small_run_options(tiny_ade, iters=4))
            cache[config] = str(work / 'iter_4.pth')
        return cache[config]

    return get


@pytest.fixture(scope='module')
def weights(tmp_path_factory):
    """Untrained weights of the demo Segmenter, as a checkpoint file."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(DEMO_SEGMENTER).model)
    path = tmp_path_factory.mktemp('weights') / 'segmenter.pth'
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return str(path)
