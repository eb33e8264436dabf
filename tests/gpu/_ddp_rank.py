"""One rank of the GPU smoke check's DDP run (tests/gpu/_smoke_run.py),
started by ``torchrun`` as ``_ddp_rank.py SPEC.json``.

Every rank builds the same model from the same seed, wraps it as the
Runner does (``MMDistributedDataParallel``, ``find_unused_parameters=
False`` as the published configs train; gradients in their parameters'
strides as ``GradLayoutHook`` lays them out) and trains it through its
``train_step`` on batches of its own. Rank 0 writes every rank's losses,
the largest difference of any parameter from rank 0's after the last
step (DDP averages the gradients, so it is 0) and the number of DDP's
"grad strides do not match bucket view strides" warnings to the spec's
``out``.
"""
import datetime
import faulthandler
import json
import os
import sys
import warnings
from typing import Dict, List

import torch
import torch.distributed as dist

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.models.layers.grad_layout import keep_grad_layout
from mmseg_whitebox.utils.atomic import write_json

from _smoke import (build_optim_wrapper, build_smoke_model, smoke_batch,
                    train_step)


def run_rank(spec: Dict) -> None:
    """This rank's part of the DDP run that ``spec`` describes; the
    process ends here (:func:`end_rank`) once it is done."""
    from mmengine.model import MMDistributedDataParallel
    # a rank that stalls (a collective nobody joins) prints every thread's
    # stack to the log and exits, before the launcher's timeout kills it
    faulthandler.dump_traceback_later(spec['watchdog'], exit=True)
    rank, local_rank = int(os.environ['RANK']), int(os.environ['LOCAL_RANK'])
    world = int(os.environ['WORLD_SIZE'])
    if spec['device'] == 'cuda':
        torch.cuda.set_device(local_rank)
        device, backend = torch.device('cuda', local_rank), 'nccl'
    else:
        torch.set_num_threads(1)
        device, backend = torch.device('cpu'), 'gloo'
    dist.init_process_group(backend,
                            timeout=datetime.timedelta(seconds=120))
    try:
        model = build_smoke_model(
            spec['model'], spec['arch'], tuple(spec['crop']), device,
            spec['seed'], spec['config_root'],
            tuple(spec['rep_grid']) if spec['rep_grid'] else None)
        optim_wrapper = build_optim_wrapper(model, 'float32', device)
        keep_grad_layout(model)
        ddp = MMDistributedDataParallel(
            module=model,
            device_ids=[local_rank] if device.type == 'cuda' else None,
            find_unused_parameters=False)
        classes = model.decode_head.num_classes
        losses: List[float] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for i in range(spec['iterations']):
                data = smoke_batch(classes, spec['batch'],
                                   tuple(spec['crop']),
                                   spec['seed'] + 1000 * (rank + 1) + i)
                losses.append(train_step(ddp, optim_wrapper, data))
        strides = sum('strides do not match' in str(w.message)
                      for w in caught)
        flat = torch.cat([p.detach().float().flatten()
                          for p in model.parameters()])
        reference = flat.clone()
        dist.broadcast(reference, 0)
        diff = (flat - reference).abs().max().reshape(1)
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)
        gathered: List = [None] * world
        dist.all_gather_object(gathered, dict(losses=losses,
                                              strides=strides))
        if rank == 0:
            write_json(spec['out'], dict(
                losses=[g['losses'] for g in gathered],
                stride_warnings=sum(g['strides'] for g in gathered),
                max_param_diff=float(diff.item()),
                device_names=[torch.cuda.get_device_name(i) for i in range(
                    torch.cuda.device_count())]
                if device.type == 'cuda' else []))
        dist.barrier()
    except BaseException:
        # the watchdog stays armed: a teardown that hangs still ends
        dist.destroy_process_group()
        raise
    end_rank()


def end_rank() -> None:
    """End this rank, its work done, without tearing gloo down (a rank
    whose results were written once hung in ``~ProcessGroupGloo`` when the
    DDP reducer released the destroyed group); the tools' workers end so
    too (``cli.runner.exit_distributed_worker``)."""
    faulthandler.cancel_dump_traceback_later()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == '__main__':
    with open(sys.argv[1]) as f:
        run_rank(json.load(f))
