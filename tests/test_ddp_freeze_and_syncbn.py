"""Two things DDP fixes when the model is wrapped, and that must therefore
be settled before: which parameters train, and which norms synchronise.

* A frozen encoder under DDP: ``model.backbone.frozen_exclude=[]`` (mmseg's
  ViT key, which ``WhiteBoxViT`` applies after building its layers and
  stem) freezes it when it is built, so DDP registers only the rest;
  ``FreezeBackboneHook``, which acts after the wrapper is built, refuses
  (one line, exit 2) an encoder that DDP registered.
* The CBT stem's SyncBN (as released) on CPU processes, where torch has no
  SyncBN (DDP refuses it on CPU modules; no CPU kernels in torch 2.13 or
  2.1): reverted to BN before DDP wraps the model, with one line in the
  log. That SyncBN makes the ranks' running statistics equal needs GPUs
  (torch's kernels); it is not tested here.

One ``tools/dist_train.sh --device cpu`` launch of 2 gloo processes covers
both: a demo config with the CBT stem, the hook and the key trains to the
end, the encoder bitwise as it started and the head moved.
Launches marked ``distributed`` (deselect with ``-m "not distributed"``).
"""
import os
import os.path as osp
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS

from _helpers import REPO, run_in_session, small_run_options
from mmseg_whitebox.apis.demo_models import DEMO_MODELS
from mmseg_whitebox.engine.hooks import FreezeBackboneHook
from mmseg_whitebox.engine.model_wrappers import CPUDistributedDataParallel
from mmseg_whitebox.utils.distributed import free_port
from mmseg_whitebox.utils.tool_error import InputError

NPROC = 2
#: the demo models on mmseg's ViT and on WhiteBoxViT
ENCODERS = ('cbsa', 'cbt')
FROZEN = 'model.backbone.frozen_exclude=[]'
STEM_CFG = Config.fromfile(osp.join(
    REPO, 'configs', '_base_', 'models', 'white_box_encoders.py')).cbt_stem


def demo_config(name: str) -> Config:
    return Config.fromfile(osp.join(REPO, DEMO_MODELS[name]))


def build(cfg: Config) -> nn.Module:
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def backbone_grads(model: nn.Module) -> set:
    return {p.requires_grad for n, p in model.named_parameters()
            if n.startswith('backbone.')}


@pytest.mark.parametrize('name', ENCODERS)
def test_frozen_exclude_freezes_the_whole_encoder_at_build(name):
    cfg = demo_config(name)
    cfg.model.backbone.frozen_exclude = []
    model = build(cfg)
    assert backbone_grads(model) == {False}
    assert all(p.requires_grad for n, p in model.named_parameters()
               if not n.startswith('backbone.'))
    # names listed stay trainable, as in mmseg's ViT
    cfg.model.backbone.frozen_exclude = ['cls_token']
    trainable = [n for n, p in build(cfg).named_parameters()
                 if n.startswith('backbone.') and p.requires_grad]
    assert trainable == ['backbone.cls_token']


def test_white_box_stem_built_after_mmseg_froze_is_frozen_too():
    cfg = demo_config('cbt')
    cfg.model.backbone.update(stem_cfg=dict(type='ConvPatchStem'),
                              frozen_exclude=[])
    assert backbone_grads(build(cfg)) == {False}


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of this process alone (destroyed after)."""
    dist.init_process_group('gloo', init_method=f'file://{tmp_path / "pg"}',
                            rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class StubRunner:
    def __init__(self, model):
        self.model, self.lines = model, []
        self.logger = self

    def info(self, line):
        self.lines.append(line)


def test_freeze_hook_refuses_an_encoder_ddp_registered(one_process_group):
    """After the wrapper is built the hook cannot freeze (DDP would still
    wait for the encoder's gradients): one line naming the build-time
    setting; an encoder frozen at build is accepted and stays frozen."""
    hook = FreezeBackboneHook()
    runner = StubRunner(MMDistributedDataParallel(
        build(demo_config('cbsa')), device_ids=None))
    with pytest.raises(InputError) as error:
        hook.before_run(runner)
    message = str(error.value)
    assert '\n' not in message
    assert message.startswith('FreezeBackboneHook cannot freeze the encoder '
                              'of a distributed run: MMDistributedDataParallel'
                              ' wrapped the model when it was built')
    assert f'--cfg-options {FROZEN}' in message
    frozen = demo_config('cbsa')
    frozen.model.backbone.frozen_exclude = []
    runner = StubRunner(MMDistributedDataParallel(build(frozen),
                                                  device_ids=None))
    hook.before_run(runner)
    hook.before_train(runner)
    assert runner.lines[0].endswith('encoder parameters frozen at their '
                                    'initialisation')
    assert backbone_grads(runner.model.module) == {False}


def test_cpu_wrapper_reverts_syncbn_before_ddp(one_process_group,
                                               monkeypatch):
    """DDP refuses SyncBN on a CPU module; the CPU processes' wrapper
    reverts it to BN (mmengine's function) first, with one line."""
    cfg = demo_config('cbt')
    cfg.model.backbone.stem_cfg = STEM_CFG
    assert STEM_CFG.norm_cfg.type == 'SyncBN'  # as released
    model = build(cfg)
    assert sum(isinstance(m, nn.SyncBatchNorm) for m in model.modules()) == 3
    with pytest.raises(ValueError, match='SyncBatchNorm'):
        MMDistributedDataParallel(model, device_ids=None)
    from mmseg_whitebox.engine import model_wrappers
    logged = []
    monkeypatch.setattr(model_wrappers, 'print_log',
                        lambda line, logger: logged.append(line))
    wrapped = CPUDistributedDataParallel(model, device_ids=None)
    assert not any(isinstance(m, nn.SyncBatchNorm)
                   for m in wrapped.modules())
    assert sum(isinstance(m, nn.modules.batchnorm._BatchNorm)
               for m in wrapped.modules()) == 3
    assert len(logged) == 1 and logged[0].startswith(
        'CPU processes: 3 SyncBN layers reverted to BN (torch runs SyncBN '
        'on GPUs only)')


# -- 2 gloo processes through tools/dist_train.sh ----------------------------

def dist_train(config: str, work_dir: str, data_root: str, *options: str):
    """``tools/dist_train.sh CONFIG 2 --device cpu``, 2 iterations; the
    output (the run must succeed)."""
    env = dict(os.environ, PYTHON=sys.executable,
               PYTHONUNBUFFERED='1', CUDA_VISIBLE_DEVICES='',
               PORT=str(free_port()))
    args = ['bash', 'tools/dist_train.sh', config, str(NPROC), '--device',
            'cpu', '--work-dir', work_dir, '--cfg-options',
            *small_run_options(data_root, iters=2), *options]
    rc, out = run_in_session(args, env, 300)
    assert rc == 0, out[-6000:]
    for error in ('Traceback', 'internal error', 'Expected to have finished'):
        assert error not in out, out[-6000:]
    assert 'Iter(train) [2/2]' in out, out[-6000:]
    return out


@pytest.mark.distributed
@pytest.mark.slow
def test_dist_train_frozen_encoder_with_the_cbt_stem(tiny_ade, tmp_path):
    """One launch for both: the demo config of the CBT encoder (the CBSA
    head on WhiteBoxViT) with the CBT stem as released (SyncBN),
    FreezeBackboneHook and the build-time freeze, from saved initial
    weights, 2 steps on 2 CPU processes. The run ends; every encoder
    parameter is bitwise as it started (stem included), the head moved;
    the stem's 3 SyncBN layers were reverted to BN, said in one line, and
    their running statistics (rank 0's, saved) took both steps: a frozen
    BN layer in training mode still tracks its batches."""
    cfg = demo_config('cbt')
    cfg.model.backbone.stem_cfg = STEM_CFG
    initial = build(cfg).state_dict()
    torch.save(dict(state_dict=initial, meta={}), tmp_path / 'initial.pth')
    cfg.custom_hooks = list(cfg.custom_hooks) + [
        dict(type='FreezeBackboneHook')]
    config = str(tmp_path / 'frozen_cbt_stem.py')
    cfg.dump(config)
    work_dir = tmp_path / 'work'
    out = dist_train(config, str(work_dir), tiny_ade, FROZEN,
                     f'load_from={tmp_path / "initial.pth"}')
    assert 'encoder parameters frozen at their initialisation' in out
    assert out.count('CPU processes: 3 SyncBN layers reverted to BN') == 1
    trained = torch.load(work_dir / 'iter_2.pth',
                         weights_only=True)['state_dict']
    model = build(cfg)
    encoder = [n for n, _ in model.named_parameters()
               if n.startswith('backbone.')]
    assert any(n.startswith('backbone.patch_embed.layers.') for n in encoder)
    for key in encoder:
        assert torch.equal(trained[key], initial[key]), key
    assert any(not torch.equal(trained[n], initial[n])
               for n, _ in model.named_parameters()
               if n.startswith('decode_head.'))
    for i in range(3):
        bn = f'backbone.patch_embed.layers.{i}.bn.'
        assert trained[bn + 'num_batches_tracked'].item() == 2
        assert not torch.equal(trained[bn + 'running_mean'],
                               initial[bn + 'running_mean'])


def test_cpu_processes_get_the_reverting_wrapper():
    """mmengine's default wrapper (named or not) becomes the one that
    reverts SyncBN; a wrapper of the config's own choice is kept."""
    from mmseg_whitebox.utils.distributed import (cpu_model_wrapper_cfg,
                                                  reverting_sync_batchnorm)
    default = reverting_sync_batchnorm(cpu_model_wrapper_cfg(Config()))
    assert default == dict(type='CPUDistributedDataParallel',
                           broadcast_buffers=False,
                           find_unused_parameters=False, device_ids=None)
    for named in ('MMDistributedDataParallel', MMDistributedDataParallel):
        assert reverting_sync_batchnorm(dict(type=named))['type'] == \
            'CPUDistributedDataParallel'
    other = dict(type='MMSeparateDistributedDataParallel')
    assert reverting_sync_batchnorm(other) == other


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.skipif(torch.cuda.device_count() < 2 or
                    not dist.is_nccl_available(),
                    reason='needs 2 CUDA GPUs and NCCL (torch has no CPU '
                    'SyncBN)')
def test_syncbn_stem_statistics_equal_across_gpus(tmp_path):
    """The CBT stem with SyncBN, as released, trained 2 steps on 2 GPUs
    with other images per rank and no buffer broadcast (mmengine's DDP
    default): its running statistics are equal on both ranks; with plain
    BN they differ (the check can fail)."""
    stats = {}
    for norm in ('SyncBN', 'BN'):
        out = tmp_path / norm
        out.mkdir()
        env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED='1')
        code, log = run_in_session(
            [sys.executable, '-m', 'torch.distributed.run',
             '--nproc_per_node=2', f'--master_port={free_port()}',
             osp.join(REPO, 'tests', 'syncbn_worker.py'), str(out), norm],
            env, 600)
        assert code == 0, log[-6000:]
        stats[norm] = [torch.load(out / f'rank{r}.pth', weights_only=True)
                       for r in range(2)]
    synced, plain = stats['SyncBN'], stats['BN']
    assert synced[0] and set(synced[0]) == set(synced[1])
    for key in synced[0]:
        torch.testing.assert_close(synced[0][key], synced[1][key],
                                   rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(plain[0][k], plain[1][k])
               for k in plain[0] if 'running_mean' in k)
