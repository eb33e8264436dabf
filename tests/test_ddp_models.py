"""Every decode head and every white-box encoder trains under DDP as one
process with the averaged gradient would.

What runs: ONE torchrun launch of 2 gloo processes (CUDA hidden) trains
every model of tests/_ddp_models.py in turn (tests/ddp_worker.py): each
model's config, shrunk (32x32 crops, width 32, one or two layers, no
dropout or drop path), built by mmengine's Runner as a user's run builds
it -- the config's custom hooks, ``launcher='pytorch'``,
``MMDistributedDataParallel(find_unused_parameters=False)`` -- and
trained for 2 iterations of SGD with momentum, each rank on its own crop
(one image per process, as the ``8xb1`` configs). The Runner, not a bare
``train_step`` loop, because that is what ``tools/dist_train.sh`` runs;
its cost (about a second per model) is small beside the launch (the
whole launch, 12 models: 27 s on a 2-core box, most of it imports).

What is compared: the weights after the 2 steps, on each rank, with a
one-process reference built here from the same initial weights (the
workers' own, saved as training starts) on the same crops, whose gradient
at each step is the mean of the two crops' own gradients (what DDP's
all-reduce computes: each rank's gradient times 1/2, summed) and whose
step is the same SGD step. Tolerance: ``atol=1e-6, rtol=1e-5`` on every
parameter (float32). DDP's scaling by 1/2 is exact and a sum of two
numbers is the same in either order, so the only differences left are
those of float32 kernels that run with another number of threads here
than in the workers (1). Measured on a 2-core box: none at all with the
reference on one thread, as here (bitwise equal); at most 1.6e-7 (MSSA-CA)
with the reference on 2 threads, 6x below the tolerance (not fitted to it).
The two ranks must end bitwise equal to each other and start from the
same weights.

Also checked: no rank printed DDP's "Grad strides do not match bucket view
strides" (every gradient laid out as its parameter), every parameter got
a gradient from every crop (``find_unused_parameters=False`` would
otherwise fail the second iteration), and one model trains the same as
two nodes on localhost (``torchrun --nnodes 2``, one process each).
Marked ``distributed`` (deselect with ``-m "not distributed"``).
"""
import os
import signal
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from _ddp_models import (ITERS, MODELS, OPTIMIZER, WORLD_SIZE, crop_batch,
                         tiny_config)
from _helpers import REPO
from mmseg_whitebox.utils.distributed import free_port

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not (dist.is_available() and
                            dist.is_gloo_available()),
                       reason='torch.distributed with gloo not available'),
]

WORKER = os.path.join(REPO, 'tests', 'ddp_worker.py')
STRIDE_WARNING = 'Grad strides do not match bucket view strides'
ATOL, RTOL = 1e-6, 1e-5
#: the model also trained as two nodes of one process each: the CBT
#: encoder under the CBSA head, whose CLS token DDP used to warn about
TWO_NODE_MODEL = 'cbt'


def worker_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONUNBUFFERED', 'OMP_NUM_THREADS')}
    env.update(CUDA_VISIBLE_DEVICES='', PYTHONPATH=REPO, PYTHONUNBUFFERED='1')
    return env


def start(torchrun_args: list, out: str, names: list) -> subprocess.Popen:
    """``torchrun TORCHRUN_ARGS tests/ddp_worker.py OUT NAMES`` in its own
    process group, stdout and stderr together."""
    cmd = [sys.executable, '-m', 'torch.distributed.run', *torchrun_args,
           WORKER, out, *names]
    return subprocess.Popen(cmd, cwd=REPO, env=worker_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finish(procs: list, timeout: int = 300) -> str:
    """Wait for ``procs``; their output, each checked for a zero exit (on a
    timeout every process group is killed)."""
    logs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                if other.poll() is None:
                    os.killpg(other.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise AssertionError(f'DDP workers timed out:\n{out[-4000:]}')
        assert proc.returncode == 0, out[-6000:]
        logs.append(out)
    return '\n'.join(logs)


@pytest.fixture(scope='module')
def one_node(tmp_path_factory):
    """Every model, 2 processes on one node: (output folder, log)."""
    out = str(tmp_path_factory.mktemp('ddp_models'))
    proc = start([f'--nproc_per_node={WORLD_SIZE}',
                  f'--master_port={free_port()}'], out, list(MODELS))
    return out, finish([proc])


def load_ranks(out: str, name: str) -> list:
    return [torch.load(os.path.join(out, f'{name}-rank{rank}.pth'),
                       weights_only=True) for rank in range(WORLD_SIZE)]


def reference_state(name: str, initial: dict) -> dict:
    """The one-process reference (module docstring): from ``initial``,
    ``ITERS`` SGD steps, each on the mean of the two crops' gradients.
    Checks on the way that every parameter gets a gradient from every crop
    and that each gradient has its parameter's strides (what DDP's bucket
    view has; a mismatch is its stride warning)."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS as SEG_MODELS

    from mmseg_whitebox.models.layers import keep_grad_layout
    init_default_scope('mmseg')
    model = SEG_MODELS.build(tiny_config(REPO, name).model)
    model.load_state_dict(initial, strict=True)
    keep_grad_layout(model)  # what the configs' GradLayoutHook does
    model.train()
    optim = build_optim_wrapper(model, dict(type='OptimWrapper',
                                            optimizer=dict(OPTIMIZER)))
    params = dict(model.named_parameters())
    for iteration in range(ITERS):
        grads = []
        for rank in range(WORLD_SIZE):
            optim.zero_grad()
            data = model.data_preprocessor(crop_batch(iteration, rank), True)
            loss, _ = model.parse_losses(model._run_forward(data,
                                                            mode='loss'))
            loss.backward()
            for key, param in params.items():
                assert param.grad is not None, f'{name}: {key} got no grad'
                assert param.grad.stride() == param.stride(), (
                    f'{name}: {key} {tuple(param.shape)}: gradient strides '
                    f'{param.grad.stride()}, parameter {param.stride()}')
            grads.append({k: p.grad.clone() for k, p in params.items()})
        for key, param in params.items():
            param.grad = (grads[0][key] + grads[1][key]) / WORLD_SIZE
        optim.step()
    return model.state_dict()


def assert_equal_to_reference(name: str, ranks: list) -> float:
    """The checks of the module docstring for model ``name``; returns the
    largest absolute difference from the reference."""
    first, second = ranks
    for key in first['initial']:
        assert torch.equal(first['initial'][key],
                           second['initial'][key]), (name, key)
        assert torch.equal(first['final'][key], second['final'][key]), \
            (name, key, 'ranks differ after training')
    expected = reference_state(name, first['initial'])
    assert list(expected) == list(first['final']), name
    largest = 0.0
    for key, value in expected.items():
        trained = first['final'][key]
        # every parameter took the steps (none left out of the gradient)
        assert not torch.equal(trained, first['initial'][key]), (name, key)
        torch.testing.assert_close(trained, value, atol=ATOL, rtol=RTOL,
                                   msg=lambda m: f'{name} {key}: {m}')
        largest = max(largest, (trained - value).abs().max().item())
    return largest


def test_no_stride_warning(one_node):
    _, log = one_node
    assert STRIDE_WARNING not in log, log[-6000:]
    assert 'Traceback' not in log, log[-6000:]


@pytest.mark.parametrize('name', list(MODELS))
def test_ddp_step_equals_mean_gradient_step(one_node, name, one_thread):
    out, _ = one_node
    assert_equal_to_reference(name, load_ranks(out, name))


def test_two_nodes_on_localhost(tmp_path, one_thread):
    """``torchrun --nnodes 2`` twice (node ranks 0 and 1, one process
    each, rendezvous on 127.0.0.1): the same step as on one node."""
    port = free_port()
    procs = [start(['--nnodes=2', f'--node_rank={node}',
                    '--nproc_per_node=1', '--master_addr=127.0.0.1',
                    f'--master_port={port}'], str(tmp_path),
                   [TWO_NODE_MODEL]) for node in range(2)]
    log = finish(procs)
    assert STRIDE_WARNING not in log, log[-6000:]
    assert_equal_to_reference(TWO_NODE_MODEL,
                              load_ranks(str(tmp_path), TWO_NODE_MODEL))
