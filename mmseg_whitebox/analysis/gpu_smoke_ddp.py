"""One rank of the GPU smoke check's DDP run (:func:`.gpu_smoke.run_ddp`).

Started by ``torchrun`` as ``python -m mmseg_whitebox.analysis.gpu_smoke_ddp
SPEC.json``, one process per visible GPU (NCCL; gloo on the CPU of a dry
run): every rank builds the same model from the same seed, wraps it in
``DistributedDataParallel`` (``find_unused_parameters=False``, as the
published configs train), and trains it on batches of its own; rank 0
writes every rank's losses, the largest difference of any parameter from
rank 0's after the last step (DDP averages the gradients, so it is 0) and
the number of DDP's "grad strides do not match bucket view strides"
warnings (a gradient laid out unlike its parameter: a copy every step) to
the spec's ``out``. Not a tool: it runs only under ``torchrun``.
"""
from __future__ import annotations

import datetime
import faulthandler
import json
import os
import sys
import warnings
from typing import Dict, List

import torch
import torch.distributed as dist


def run_rank(spec: Dict) -> None:
    """This rank's part of the DDP run that ``spec`` describes; the
    process ends here (:func:`end_rank`) once it is done."""
    import mmseg_whitebox  # noqa: F401  (compat + registration first)
    from mmseg_whitebox.utils.atomic import write_json
    from mmseg_whitebox.models.layers.grad_layout import keep_grad_layout
    from .gpu_smoke import (build_optim_wrapper, build_smoke_model,
                            smoke_batch, train_iteration)
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
            spec['model'], spec['arch'], device, spec['seed'],
            spec['config_root'],
            tuple(spec['rep_grid']) if spec['rep_grid'] else None)
        optim_wrapper = build_optim_wrapper(model, 'float32', device)
        # as GradLayoutHook does in the Runner: gradients in their
        # parameters' strides, no copy into DDP's buckets
        keep_grad_layout(model)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == 'cuda' else None,
            find_unused_parameters=False)
        classes = model.decode_head.num_classes
        losses: List[float] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for i in range(spec['iterations']):
                inputs, samples = smoke_batch(
                    classes, spec['batch'], tuple(spec['crop']),
                    spec['seed'] + 1000 * (rank + 1) + i, device)
                losses.append(train_iteration(ddp, optim_wrapper, inputs,
                                              samples))
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
    """End this rank, its work done, without tearing gloo down: a rank
    whose results were written once hung in ``~ProcessGroupGloo`` when
    the DDP reducer released the destroyed group (a futex wait, after its
    watchdog was cancelled), until the launcher's timeout; the tools' own
    workers end so too (``cli.runner.exit_distributed_worker``)."""
    faulthandler.cancel_dump_traceback_later()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def main(argv: List[str]) -> None:
    with open(argv[0]) as f:
        run_rank(json.load(f))


if __name__ == '__main__':
    main(sys.argv[1:])
