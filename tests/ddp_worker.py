"""One DDP worker of tests/test_ddp_models.py, started by torchrun:
``ddp_worker.py OUT NAME [NAME ...]``.

Joins the gloo process group that torchrun describes, then trains every
model named (tests/_ddp_models.py) in turn, as a user's run trains it:
mmengine's Runner built from the model's (shrunk) config, with the
config's custom hooks, ``launcher='pytorch'`` and
``MMDistributedDataParallel(find_unused_parameters=False)``, for
``ITERS`` iterations on this rank's own crop each. Writes
``OUT/NAME-rank<R>.pth``: the weights after initialisation (as training
starts) and after the last step.
"""
import os.path as osp
import sys

import torch
import torch.distributed as dist
from mmengine.hooks import Hook
from mmengine.runner import Runner
from torch.utils.data import DataLoader

import mmseg_whitebox  # noqa: F401  (registers the modules, compat)
from _ddp_models import ITERS, OPTIMIZER, crop_batch, tiny_config

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def only_item(items):
    """The collate function: each item already is a collated batch."""
    return items[0]


class InitialWeights(Hook):
    """Keeps the weights training starts from (after ``init_weights``)."""

    priority = 'LOWEST'

    def before_train(self, runner) -> None:
        self.state = {k: v.clone() for k, v in
                      runner.model.module.state_dict().items()}


def train(name: str, out: str) -> None:
    rank = dist.get_rank()
    cfg = tiny_config(REPO, name)
    # this rank's crops, one per iteration, in order
    batches = [crop_batch(i, rank) for i in range(ITERS)]
    loader = DataLoader(batches, batch_size=1, shuffle=False,
                        collate_fn=only_item)
    initial = InitialWeights()
    runner = Runner(
        model=cfg.model,
        work_dir=osp.join(out, f'work-{name}'),
        experiment_name=f'ddp-{name}',
        train_dataloader=loader,
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=ITERS),
        optim_wrapper=dict(type='OptimWrapper', optimizer=OPTIMIZER),
        # no checkpoint written; the rest as mmengine's defaults
        default_hooks=dict(checkpoint=None),
        custom_hooks=list(cfg.custom_hooks) + [initial],
        launcher='pytorch',
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
        randomness=dict(seed=0),
        default_scope='mmseg',
        log_level='WARNING',
        # the Runner reads the wrapper from its config: mmengine's DDP
        # wrapper, on CPU processes (no device ids)
        cfg=dict(model_wrapper_cfg=dict(
            type='MMDistributedDataParallel', find_unused_parameters=False,
            broadcast_buffers=False, device_ids=None)))
    runner.train()
    torch.save(dict(initial=initial.state,
                    final=runner.model.module.state_dict()),
               osp.join(out, f'{name}-rank{rank}.pth'))


def main(argv) -> None:
    out, names = argv[0], argv[1:]
    dist.init_process_group('gloo')
    try:
        for name in names:
            train(name, out)
    finally:
        dist.destroy_process_group()


if __name__ == '__main__':
    main(sys.argv[1:])
