"""One rank of tests/test_ddp_freeze_and_syncbn.py's GPU check, started by
torchrun on 2 GPUs: ``syncbn_worker.py OUT NORM``.

Builds the CBT demo encoder with the CBT conv stem (its norm ``NORM``:
``SyncBN`` as released, or ``BN``), wraps it in mmengine's DDP on this
rank's GPU without broadcasting buffers (mmengine's default), trains 2
SGD steps on this rank's own images, and writes the stem's norm buffers
to ``OUT/rank<R>.pth``.
"""
import os.path as osp
import sys

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS

import mmseg_whitebox  # noqa: F401  (registers the modules, compat)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def main(out: str, norm: str) -> None:
    dist.init_process_group('nccl')
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(
        REPO, 'configs/cbsa/cbsa_cbt-demo_1xb8-800iter_synthade-128x128.py'))
    stem = Config.fromfile(osp.join(
        REPO, 'configs/_base_/models/white_box_encoders.py')).cbt_stem
    stem.norm_cfg = dict(stem.norm_cfg, type=norm)
    cfg.model.backbone.stem_cfg = stem
    torch.manual_seed(0)
    encoder = MODELS.build(cfg.model.backbone).cuda()
    model = MMDistributedDataParallel(encoder, device_ids=[rank],
                                      broadcast_buffers=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(2, 2, 3, 128, 128,
                         generator=torch.Generator().manual_seed(rank))
    for step in range(2):
        out_features = model(images[step].cuda() * (1 + rank))
        loss = sum(f.float().pow(2).mean() for f in out_features)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    buffers = {k: v.cpu() for k, v in encoder.state_dict().items()
               if 'patch_embed' in k and ('running_' in k or 'batches' in k)}
    torch.save(buffers, osp.join(out, f'rank{rank}.pth'))
    dist.destroy_process_group()


if __name__ == '__main__':
    main(*sys.argv[1:])
