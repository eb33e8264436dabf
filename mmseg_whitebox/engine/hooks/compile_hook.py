"""What a config's ``compile`` (``True`` or ``torch.compile``'s keyword
arguments, as mmengine reads it) compiles: the segmentor's ``loss``
(training) and ``encode_decode`` (whole and sliding-window inference).

mmengine would compile the whole ``train_step``, whose AdamW step with
parameter groups dynamo cannot trace; so a run with ``compile`` gets this
hook, which compiles the two calls and turns mmengine's compilation off.
The data preprocessing and the optimizer step stay eager. Why the loss
runs with :data:`DYNAMO_OPTIONS` and where graphs still break:
docs/compile.md.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmseg.registry import HOOKS

from mmseg_whitebox.compat import decompose_as_newer_torch
from mmseg_whitebox.utils.capabilities import (
    COMPILES_CAPTURED_SCALARS, DDP_GRAPH_SPLIT_TAKES_SUBMODULES,
    INDUCTOR_ONE_THREAD_GRADIENTS_RIGHT, TORCH_VERSION)
from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.tool_error import InputError

#: the segmentor methods compiled (module docstring)
COMPILED_METHODS = ('loss', 'encode_decode')
#: dynamo's settings while a compiled method traces: the loss's count of
#: non-ignored pixels (``.item()``) captured, not a graph break (where
#: inductor can compile a captured scalar: ``COMPILES_CAPTURED_SCALARS``)
DYNAMO_OPTIONS = (dict(capture_scalar_outputs=True)
                  if COMPILES_CAPTURED_SCALARS else {})
#: dynamo's settings under DDP: the loss is split at DDP's gradient
#: buckets (DDPOptimizer) so all-reduces overlap the backward; where the
#: splitter fails on mmseg's ViT (``DDP_GRAPH_SPLIT_TAKES_SUBMODULES``)
#: one graph, all-reduced after the compiled backward
DDP_OPTIONS = ({} if DDP_GRAPH_SPLIT_TAKES_SUBMODULES
               else dict(optimize_ddp=False))


def canonical_strides(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with the strides of a new contiguous tensor of its shape
    (a view where it is contiguous already; a copy otherwise)."""
    return tensor.contiguous().view(-1).view(tensor.shape)


def _with_canonical_labels(loss: Callable) -> Callable:
    """``loss(inputs, data_samples)`` with each sample's label map given
    :func:`canonical_strides` first. mmseg packs a flipped label map with
    another stride along its first (size-1) dimension than an unflipped
    one, and dynamo guards on strides: a batch's pattern of flips would
    otherwise compile the loss anew, up to ``2 ** batch size`` times."""
    def call(inputs: torch.Tensor, data_samples: List[Any]) -> Any:
        for sample in data_samples:
            if 'gt_sem_seg' in sample:
                labels = sample.gt_sem_seg
                labels.data = canonical_strides(labels.data)
        return loss(inputs, data_samples)
    return call


def compile_segmentor(model: torch.nn.Module,
                      compile_cfg: Any) -> Dict[str, Any]:
    """Compile ``model``'s :data:`COMPILED_METHODS` in place (unwrapped
    from DDP first) with :data:`DYNAMO_OPTIONS` and :data:`DDP_OPTIONS`
    (on torch 2.1 with the loss's ops decomposed:
    :func:`~mmseg_whitebox.compat.decompose_as_newer_torch`). Returns
    ``torch.compile``'s arguments used."""
    import torch._dynamo.config as dynamo_config
    model = unwrap_model(model)
    options = {} if compile_cfg is True else dict(compile_cfg)
    decompose_as_newer_torch()
    for name in COMPILED_METHODS:
        compiled = dynamo_config.patch(**DYNAMO_OPTIONS, **DDP_OPTIONS)(
            torch.compile(getattr(model, name), **options))
        if name == 'loss':
            compiled = _with_canonical_labels(compiled)
        setattr(model, name, compiled)
    return options


@HOOKS.register_module()
class CompileHook(Hook):
    """Before the run (and before mmengine would compile ``train_step``):
    the segmentor's loss and inference compiled with the config's
    ``compile`` arguments, and mmengine's own compilation turned off
    (module docstring)."""

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self._options: Any = None  # the run's ``torch.compile`` arguments

    def before_run(self, runner: Any) -> None:
        compile_cfg = runner.cfg.get('compile', None)
        if not compile_cfg:
            return
        self._options = compile_segmentor(runner.model, compile_cfg)
        runner.cfg.compile = False  # mmengine's train_step compilation
        options = self._options or 'defaults'
        print_log(f'compiled the segmentor\'s loss and encode_decode '
                  f'(torch.compile, {options}); the first iterations '
                  'include the compilation', logger='current')

    def before_train(self, runner: Any) -> None:
        """Refuse, before anything is compiled, a training whose compiled
        gradients this torch gets wrong (inductor on the CPU with one
        thread: ``INDUCTOR_ONE_THREAD_GRADIENTS_RIGHT``)."""
        if self._options is None or INDUCTOR_ONE_THREAD_GRADIENTS_RIGHT or \
                self._options.get('backend', 'inductor') != 'inductor' or \
                torch.get_num_threads() != 1:
            return
        if next(runner.model.parameters()).device.type == 'cpu':
            raise InputError(
                f'compile: torch {TORCH_VERSION}\'s inductor computes wrong '
                'gradients on the CPU with one thread (OMP_NUM_THREADS=1 '
                'or torch.set_num_threads(1)): train with 2 or more '
                'threads, with compile=dict(backend=\'aot_eager\'), or on '
                'torch >= 2.4')
