"""What a config's ``compile`` (``True`` or ``torch.compile``'s keyword
arguments, as mmengine reads it) compiles: the segmentor's ``loss``
(training) and ``encode_decode`` (the network from image to class maps,
which whole and sliding-window inference call: validation,
``tools/test.py``, the noise sweep).

mmengine's Runner, given ``compile``, compiles the whole ``train_step``,
the optimizer step included, and leaves inference eager. With the
configs' AdamW and its parameter groups, dynamo cannot trace that step
(torch 2.13: ``InternalTorchDynamoError: AttributeError:
'UserDefinedDictVariable' object has no attribute 'items'`` at
``for group in self.param_groups``), so a run with ``compile`` set gets
this hook (:func:`~mmseg_whitebox.engine.runner_config.runner_config`):
it compiles the model's two calls itself and turns mmengine's off. The
data preprocessing and the optimizer step stay eager; the forward and
backward passes are compiled. A perturbation of the noise sweep changes
the weights in place, never their shapes: the sweep compiles once.

The models trace whole (``tests/test_compile.py``). The published
configs' loss (``CrossEntropyLoss(avg_non_ignore=True)``, the released
mean over the pixels that are not ignored) counts those pixels with
``.item()``, which breaks the graph unless dynamo captures the scalar:
the compiled calls run with :data:`DYNAMO_OPTIONS` (not on torch 2.1).
The loss then breaks only in mmseg's ``accuracy``, which its decode heads
log beside the loss: it indexes the pixels that are not ignored (a
data-dependent shape).
Dynamo's ``capture_dynamic_output_shape_ops`` would capture it, but
inductor then fails on that graph (torch 2.13: ``AssertionError: u6 ->
u0`` in ``aten.index``), so it stays a break (docs/compile.md).
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
#: non-ignored pixels (``.item()``) captured, not a graph break; where
#: inductor cannot compile a captured scalar (torch 2.1, the legacy stack:
#: ``COMPILES_CAPTURED_SCALARS`` of :mod:`mmseg_whitebox.utils.capabilities`)
#: the count stays a break
DYNAMO_OPTIONS = (dict(capture_scalar_outputs=True)
                  if COMPILES_CAPTURED_SCALARS else {})
#: dynamo's settings under DDP: a call compiled inside DDP's forward (the
#: loss, as mmengine's DDP wrapper runs it) is split at DDP's gradient
#: bucket boundaries (dynamo's DDPOptimizer), so that the all-reduce of a
#: bucket overlaps the rest of the backward. Where the splitter fails on
#: mmseg's ViT (torch 2.1: ``DDP_GRAPH_SPLIT_TAKES_SUBMODULES`` of
#: :mod:`mmseg_whitebox.utils.capabilities`) the compiled calls run with
#: ``optimize_ddp=False``: one graph, whose gradients DDP all-reduces once
#: the compiled backward has made them (no overlap)
DDP_OPTIONS = ({} if DDP_GRAPH_SPLIT_TAKES_SUBMODULES
               else dict(optimize_ddp=False))


def compile_options(compile_cfg: Any) -> Dict[str, Any]:
    """``torch.compile``'s keyword arguments from a config's ``compile``
    (``True``: the defaults), as mmengine reads it."""
    return {} if compile_cfg is True else dict(compile_cfg)


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


def compile_segmentor(model: torch.nn.Module, compile_cfg: Any) -> None:
    """Compile ``model``'s :data:`COMPILED_METHODS` in place (unwrapped
    from DDP first), each traced with :data:`DYNAMO_OPTIONS` and
    :data:`DDP_OPTIONS` (and, on torch 2.1, the loss's ops decomposed:
    :func:`~mmseg_whitebox.compat.decompose_as_newer_torch`); the loss's
    label maps given one layout
    (:func:`_with_canonical_labels`)."""
    import torch._dynamo.config as dynamo_config
    model = unwrap_model(model)
    options = compile_options(compile_cfg)
    decompose_as_newer_torch()
    for name in COMPILED_METHODS:
        compiled = dynamo_config.patch(**DYNAMO_OPTIONS, **DDP_OPTIONS)(
            torch.compile(getattr(model, name), **options))
        if name == 'loss':
            compiled = _with_canonical_labels(compiled)
        setattr(model, name, compiled)


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
        self._options = compile_options(compile_cfg)
        compile_segmentor(runner.model, compile_cfg)
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
