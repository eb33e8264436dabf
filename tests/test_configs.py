"""Every config in configs/ loads, names its parts as mmseg does, builds
its model (one whose loss can also be computed in bands of rows) and runs
a forward pass on a small non-square input."""
import glob
import os.path as osp
import re

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmseg.models.decode_heads import DAHead
from mmseg.models.decode_heads.decode_head import BaseDecodeHead

from _helpers import REPO
from mmseg_whitebox.models.losses import check_banded_loss
from mmseg_whitebox.utils.tool_error import InputError

CONFIGS = sorted(
    osp.relpath(p, REPO)
    for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'),
                       recursive=True)
    if '_base_' not in p)
# {algo}_{backbone}_{schedule}_{dataset}-{crop}.py (mmseg's naming)
NAME = re.compile(r'^[a-z0-9-]+_[a-z0-9-]+(_[a-z]+)?_\d+xb\d+-\d+[a-z]*_'
                  r'[a-z0-9-]+-\d+x\d+\.py$')


def test_there_are_configs():
    assert len(CONFIGS) >= 6


@pytest.mark.parametrize('path', CONFIGS)
def test_config_name_follows_mmseg(path):
    assert NAME.match(osp.basename(path)), path


def test_every_config_declares_its_world_batch_for_lr_scaling():
    """Every config's ``auto_scale_lr`` is off, with ``base_batch_size``
    the world batch of its name (``8xb1``: 8 GPUs x 1 = 8), which is
    ``train_dataloader.batch_size`` per GPU: ``--auto-scale-lr`` scales
    the released learning rate from there."""
    seen = {}
    for path in CONFIGS:
        gpus, per_gpu = map(int, re.search(r'_(\d+)xb(\d+)-',
                                           osp.basename(path)).groups())
        cfg = Config.fromfile(osp.join(REPO, path))
        assert cfg.train_dataloader.batch_size == per_gpu, path
        assert cfg.get('auto_scale_lr') == dict(
            enable=False, base_batch_size=gpus * per_gpu), path
        seen[gpus * per_gpu] = path
    assert sorted(seen) == [8, 16]  # the Pascal Context configs: 8 x 2


def largest_rep_grid(obj) -> tuple:
    """The largest CBSA ``rep_grid`` anywhere in a model config (CBSA
    refuses a token grid smaller than its representatives grid)."""
    found = [(0, 0)]
    if isinstance(obj, dict):
        grid = obj.get('rep_grid')
        if grid is not None:
            found.append((grid, grid) if isinstance(grid, int) else
                         tuple(grid))
        found += [largest_rep_grid(v) for v in obj.values()]
    elif isinstance(obj, (list, tuple)):
        found += [largest_rep_grid(v) for v in obj]
    return tuple(max(g[i] for g in found) for i in range(2))


@pytest.mark.parametrize('path', CONFIGS)
def test_config_builds_and_forwards(path):
    from mmseg.registry import MODELS
    cfg = Config.fromfile(osp.join(REPO, path))
    assert 'mmseg_whitebox' in cfg.custom_imports['imports']
    assert any(h['type'] == 'WeightsOnlyCheckpointHook'
               for h in cfg.custom_hooks)
    init_default_scope('mmseg')
    cfg.model.pretrained = None
    cfg.model.backbone.pop('init_cfg', None)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.eval()
    # model.type=BandedLossEncoderDecoder accepts its heads (its check),
    # but mmseg's DAHead, whose three losses it refuses by name
    heads = [m for m in model.modules() if isinstance(m, BaseDecodeHead)]
    assert model.decode_head in heads
    for head in heads:
        if isinstance(head, DAHead):
            with pytest.raises(InputError, match='DAHead overrides '
                               'BaseDecodeHead.loss_by_feat'):
                check_banded_loss(head)
        else:
            check_banded_loss(head)
    patch = cfg.model.backbone.get('patch_size', 16)
    # a non-square token grid, 4x6 or as large as CBSA's rep_grid needs
    rh, rw = largest_rep_grid(cfg.model)
    h, w = max(4, rh) * patch, max(6, rw + 2) * patch
    with torch.no_grad():
        out = model(torch.randn(1, 3, h, w), mode='tensor')
    if isinstance(out, tuple):
        # mmseg's DAHead: the summed, position and channel attention
        # logits; its predictions are the first
        assert isinstance(model.decode_head, DAHead)
        out = out[0]
    num_classes = cfg.model.decode_head.num_classes
    assert out.shape[:2] == (1, num_classes)
    assert out.shape[2] * w == out.shape[3] * h
    assert torch.isfinite(out).all()
