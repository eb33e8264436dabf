"""A 2-process run (tools/dist_train.sh, gloo, CUDA hidden) killed while
it saves a checkpoint, then resumed with ``--resume`` on 2 processes:
rank 0 alone removes the cut-off file, every rank restores its own random
states, no rank reads a batch it had trained, and the run ends bitwise
equal to an uninterrupted one. Marked ``distributed`` (deselect with
``-m "not distributed"``)."""
import os
import os.path as osp

import pytest
import torch

from _helpers import REPO, assert_same, small_run_options
from fault_plugin import FAULT
from read_count_plugin import READS, training_reads
from test_distributed import NPROC, pytestmark, run_script  # noqa: F401

#: what every launched training run takes to run on CPU processes
CPU_ARGS = ['--device', 'cpu']

DEMO_CBSA = osp.join(REPO, 'configs', 'cbsa',
                     'cbsa_vit-demo_1xb8-800iter_synthade-128x128.py')
ITERS = 6


def _options(data_root: str) -> list:
    """6 iterations of 1 crop per process, a checkpoint and a validation
    every 2; real randomness in training (drop path), and another seed per
    rank (mmengine's diff_rank_seed), so that a rank restoring another's
    random state draws other numbers."""
    return small_run_options(data_root, iters=ITERS, batch_size=1) + [
        'default_hooks.checkpoint.interval=2', 'train_cfg.val_interval=2',
        'model.backbone.drop_path_rate=0.3', 'randomness.diff_rank_seed=True']


def _train(config: str, work: str, data_root: str, resume: bool = False,
           fault: str = '', check: bool = True, reads: str = '') -> tuple:
    tests = osp.dirname(osp.abspath(__file__))
    env = {FAULT: fault, READS: reads, 'PYTHONPATH': os.pathsep.join(
        p for p in (tests, os.environ.get('PYTHONPATH')) if p)}
    return run_script(['tools/dist_train.sh', config, str(NPROC),
                       '--work-dir', work] + CPU_ARGS +
                      (['--resume'] if resume else []) + ['--cfg-options'] +
                      _options(data_root), check=check, timeout=300, **env)


@pytest.mark.slow
def test_killed_during_a_save_then_resumed_on_two_processes(tiny_ade,
                                                            tmp_path):
    config = tmp_path / 'cbsa_fault.py'
    config.write_text(
        f'_base_ = [{DEMO_CBSA!r}]\n'
        "custom_imports = dict(imports=['mmseg_whitebox', 'fault_plugin', "
        "'read_count_plugin'], allow_failed_imports=False)\n")
    straight, crashed = str(tmp_path / 'straight'), str(tmp_path / 'crash')
    _train(str(config), straight, tiny_ade)

    # rank 0 killed (SIGKILL) half-way through its second save (iter_4)
    rc, log = _train(str(config), crashed, tiny_ade, fault='kill-save:2',
                     check=False)
    assert rc != 0 and 'SIGKILL' in log, log[-4000:]
    assert osp.isfile(osp.join(crashed, 'iter_2.pth'))
    assert not osp.exists(osp.join(crashed, 'iter_4.pth'))
    cut = [n for n in os.listdir(crashed) if n.startswith('.iter_4.')]
    assert len(cut) == 1, os.listdir(crashed)

    reads = str(tmp_path / 'resumed_reads.log')
    _, log = _train(str(config), crashed, tiny_ade, resume=True, reads=reads)
    assert log.count('note: removing') == 1, log[-6000:]
    assert f'note: removing {osp.join(crashed, cut[0])}' in log
    assert 'FileNotFoundError' not in log and 'Traceback' not in log
    assert 'resumed from the latest checkpoint' in log
    assert 'random states not restored' not in log
    assert not [n for n in os.listdir(crashed) if n.startswith('.iter')]
    # resumed at iteration 2: each rank reads the 4 images it trains on,
    # none of the 2 it had trained (loading them again would read 12)
    assert training_reads(reads) == NPROC * (ITERS - 2)

    a, b = (torch.load(osp.join(work, f'iter_{ITERS}.pth'),
                       weights_only=True) for work in (straight, crashed))
    assert a['meta']['iter'] == b['meta']['iter'] == ITERS
    assert_same(a['state_dict'], b['state_dict'], 'state_dict')
    assert_same(a['optimizer'], b['optimizer'], 'optimizer')
    assert_same(a['rng_state'], b['rng_state'], 'rng_state')
    ranks = a['rng_state']['ranks']
    assert a['rng_state']['world_size'] == NPROC == len(ranks)
    assert not torch.equal(ranks[0]['torch'], ranks[1]['torch'])
