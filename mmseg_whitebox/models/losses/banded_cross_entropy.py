"""mmseg's decode-head loss computed a band of label rows at a time.

``BaseDecodeHead.loss_by_feat`` resizes the logits (B, C, h, w) to the
label size before the cross-entropy: at a 1024x1024 crop and 150 classes
the resized logits, their softmax and their gradient are 600 MB each per
image. Bilinear resizing is separable, so :func:`banded_loss_by_feat`
resizes a band of rows at a time (PyTorch's own weights), adds up its
losses and correct pixels, frees it, and resizes it again in the backward
pass: the same losses, ``acc_seg`` and gradients up to summation order.

Replicated from mmseg 1.2.2 (``loss_by_feat``, ``cross_entropy``,
``weight_reduce_loss``, ``accuracy``): every ``loss_decode`` entry (same
``loss_name`` added), ``loss_weight``, ``class_weight``, ``ignore_index``,
``reduction`` 'mean' (sum / (``avg_factor`` + eps)) or 'sum', and
``avg_non_ignore``; with class weights ``avg_factor`` follows the
installed mmseg (:func:`class_weight_average`).
"""
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmseg.models.decode_heads.decode_head import BaseDecodeHead
from mmseg.models.losses import CrossEntropyLoss
from mmseg.utils import SampleList
from torch import Tensor
from torch.autograd.function import once_differentiable

from mmseg_whitebox.utils.tool_error import InputError

#: label rows per band by default (1024 columns, 150 classes, batch 2:
#: 78 MB per band-sized float32 buffer)
DEFAULT_BAND_ROWS = 64
#: mmseg's guard against a zero divisor (losses/utils.py weight_reduce_loss,
#: losses/accuracy.py)
MMSEG_EPS = torch.finfo(torch.float32).eps


def decode_losses(head: BaseDecodeHead) -> List[nn.Module]:
    """The head's ``loss_decode`` entries, in mmseg's order."""
    losses = head.loss_decode
    return list(losses) if isinstance(losses, nn.ModuleList) else [losses]


@lru_cache(maxsize=None)
def class_weight_average(avg_non_ignore: bool) -> Tuple[str, bool]:
    """How the installed mmseg's ``cross_entropy`` averages a
    class-weighted loss, found by running it on two pixels:
    ``(pixels, indexes_ignored)``.

    ``pixels``: ``'every'`` when ``avg_factor`` sums the class weights of
    every pixel's label, ``'kept'`` of the pixels not ignored only;
    ``indexes_ignored``: whether it looks up ignored labels' weights too
    (failing on an ``ignore_index`` such as 255). mmseg 1.2.2: 'every'
    ('kept' with ``avg_non_ignore``), True; onedl-mmsegmentation 1.4.2:
    'kept', False, failing with ``avg_non_ignore`` (:class:`InputError`).
    """
    from mmseg.models.losses.cross_entropy_loss import cross_entropy
    pred = torch.zeros(1, 2, 1, 2, dtype=torch.float64)
    weight = torch.tensor([1., 3.], dtype=torch.float64)
    try:
        # pixel 0: class 0 (weight 1, loss log 2); pixel 1: ignored class 1
        # (weight 3): the divisor is 4 + eps or 1 + eps
        loss = cross_entropy(pred, torch.tensor([[[0, 1]]]),
                             class_weight=weight, reduction='mean',
                             ignore_index=1, avg_non_ignore=avg_non_ignore)
    except (IndexError, RuntimeError) as exc:
        raise InputError(
            'the installed mmseg cannot average a class-weighted '
            f'cross-entropy with avg_non_ignore={avg_non_ignore} '
            f'({type(exc).__name__}: {exc}), so neither can the banded '
            'loss; set avg_non_ignore or drop class_weight') from exc
    divisor = math.log(2) / loss.item() - MMSEG_EPS
    if math.isclose(divisor, 4.0, rel_tol=1e-9):
        pixels = 'every'
    elif math.isclose(divisor, 1.0, rel_tol=1e-9):
        pixels = 'kept'
    else:
        raise InputError(
            'the installed mmseg averages a class-weighted cross-entropy in '
            'a way the banded loss does not know (divisor '
            f'{divisor} for weights 1 and 3)')
    try:
        cross_entropy(pred, torch.tensor([[[0, 255]]]), class_weight=weight,
                      reduction='mean', ignore_index=255,
                      avg_non_ignore=avg_non_ignore)
        indexes_ignored = False
    except (IndexError, RuntimeError):
        indexes_ignored = True
    return pixels, indexes_ignored


def check_banded_loss(head: nn.Module) -> None:
    """:class:`InputError` unless the banded loss can stand in for
    ``head``'s: ``BaseDecodeHead.loss_by_feat`` with softmax
    ``CrossEntropyLoss`` entries and no pixel sampler."""
    name = type(head).__name__
    if not isinstance(head, BaseDecodeHead):
        raise InputError(f'{name} is not an mmseg BaseDecodeHead')
    for method in ('loss', 'loss_by_feat'):
        if getattr(type(head), method) is not getattr(BaseDecodeHead,
                                                      method):
            raise InputError(
                f'{name} overrides BaseDecodeHead.{method}; the banded loss '
                'computes only BaseDecodeHead.loss_by_feat\'s loss')
    if head.sampler is not None:
        raise InputError(
            f'{name} has a pixel sampler ({type(head.sampler).__name__}), '
            'which weighs pixels from the full-resolution logits; the '
            'banded loss does not support one')
    for loss in decode_losses(head):
        what = f'{name}.loss_decode {type(loss).__name__}'
        if type(loss) is not CrossEntropyLoss:
            raise InputError(f'{what}: the banded loss computes '
                             'mmseg\'s CrossEntropyLoss only')
        if loss.use_sigmoid or loss.use_mask:
            raise InputError(f'{what}: use_sigmoid/use_mask; the banded '
                             'loss computes the softmax cross-entropy '
                             'only')
        if loss.reduction not in ('mean', 'sum'):
            raise InputError(f'{what}: reduction {loss.reduction!r}; '
                             "the banded loss reduces with 'mean' or "
                             "'sum'")
        if loss.class_weight is not None:
            if len(loss.class_weight) != head.out_channels:
                raise InputError(
                    f'{what}: {len(loss.class_weight)} class weights for '
                    f'{head.out_channels} classes')
            if loss.reduction == 'mean':
                class_weight_average(bool(loss.avg_non_ignore))


def interpolation_matrix(in_size: int, out_size: int, align_corners: bool,
                         dtype: torch.dtype, device: torch.device) -> Tensor:
    """(out_size, in_size): ``F.interpolate``'s linear resize along one
    axis, taken from it (resizing unit vectors) on any device and dtype."""
    eye = torch.eye(in_size, dtype=dtype, device=device)[None]
    return F.interpolate(eye, size=out_size, mode='linear',
                         align_corners=align_corners)[0].t()


@dataclass
class Band:
    """Label rows ``start:stop``, made from logit rows ``first:last`` with
    ``weights`` (stop - start, last - first; None: the same rows)."""
    start: int
    stop: int
    first: int
    last: int
    weights: Optional[Tensor]


@dataclass
class BandPlan:
    """How to resize (B, C, h, w) logits to a label map, band by band,
    in ``dtype``."""
    bands: List[Band]
    width: int
    align_corners: bool
    dtype: torch.dtype

    def resize(self, logits: Tensor, band: Band) -> Tensor:
        """(B, C, last - first, w) logit rows -> the band's (B, C,
        stop - start, width) resized rows."""
        x = logits.to(self.dtype)
        if band.weights is not None:
            x = torch.matmul(band.weights, x)
        if x.shape[-1] != self.width:
            batch, classes, rows, width = x.shape
            x = F.interpolate(x.reshape(batch, classes * rows, width),
                              size=self.width, mode='linear',
                              align_corners=self.align_corners)
            x = x.reshape(batch, classes, rows, self.width)
        return x


def band_plan(logit_size: Sequence[int], label_size: Sequence[int],
              align_corners: bool, rows: int, dtype: torch.dtype,
              device: torch.device) -> BandPlan:
    """The bands of ``rows`` label rows, each with the logit rows its
    bilinear resize reads (those with a non-zero weight)."""
    in_h, _ = (int(s) for s in logit_size)
    out_h, out_w = (int(s) for s in label_size)
    matrix = support = None
    if in_h != out_h:
        matrix = interpolation_matrix(in_h, out_h, align_corners, dtype,
                                      device)
        support = (matrix != 0).cpu()
    bands = []
    for start in range(0, out_h, rows):
        stop = min(out_h, start + rows)
        if matrix is None:
            bands.append(Band(start, stop, start, stop, None))
            continue
        read = support[start:stop].any(0).nonzero()
        first, last = int(read[0]), int(read[-1]) + 1
        bands.append(Band(start, stop, first, last,
                          matrix[start:stop, first:last].contiguous()))
    return BandPlan(bands, out_w, align_corners, dtype)


def _no_autocast(device: torch.device):
    return torch.autocast(device_type=device.type, enabled=False)


class BandedCrossEntropy(torch.autograd.Function):
    """Per ``loss_decode`` entry, the summed (class-weighted)
    cross-entropy of the resized logits, and the number of correct
    pixels; band by band. The backward pass resizes each band again:
    ``w_y (softmax - onehot_y)`` per pixel, then autograd through the
    resize."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, plan: BandPlan,
                class_weights: List[Optional[Tensor]],
                ignore_index: int) -> Tuple[Tensor, Tensor]:
        ctx.save_for_backward(logits, labels)
        ctx.plan, ctx.class_weights = plan, class_weights
        ctx.ignore_index = ignore_index
        sums = torch.zeros(len(class_weights), dtype=plan.dtype,
                           device=logits.device)
        correct = torch.zeros((), dtype=torch.long, device=logits.device)
        with _no_autocast(logits.device):
            for band in plan.bands:
                x = plan.resize(logits[:, :, band.first:band.last], band)
                y = labels[:, band.start:band.stop]
                # as mmseg's accuracy: the top-1 class of pred.topk
                top = x.topk(1, dim=1).indices[:, 0]
                correct += ((top == y) & (y != ignore_index)).sum()
                del top
                x = x.log_softmax(dim=1)
                for i, weight in enumerate(class_weights):
                    sums[i] += F.nll_loss(x, y, weight=weight,
                                          ignore_index=ignore_index,
                                          reduction='sum')
                del x
        ctx.mark_non_differentiable(correct)
        return sums, correct

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_sums: Tensor, grad_correct: Optional[Tensor]):
        logits, labels = ctx.saved_tensors
        with _no_autocast(logits.device):
            grad = BandedCrossEntropy._logit_grad(
                logits, labels, ctx.plan, ctx.class_weights,
                ctx.ignore_index, grad_sums.to(ctx.plan.dtype))
        return grad.to(logits.dtype), None, None, None, None

    @staticmethod
    def _logit_grad(logits: Tensor, labels: Tensor, plan: BandPlan,
                    class_weights: List[Optional[Tensor]], ignore_index: int,
                    grad_sums: Tensor) -> Tensor:
        grad = torch.zeros_like(logits, dtype=plan.dtype)
        for band in plan.bands:
            y = labels[:, band.start:band.stop]
            kept = y != ignore_index
            safe = y.masked_fill(~kept, 0)
            # d sum_e g_e CE_e / d logit = (sum_e g_e w_e[y]) (p - onehot)
            coef = torch.zeros(y.shape, dtype=plan.dtype, device=y.device)
            for g, weight in zip(grad_sums, class_weights):
                coef += g * weight[safe] if weight is not None else g
            coef *= kept
            coef = coef[:, None]
            with torch.enable_grad():
                rows = logits[:, :, band.first:band.last].detach()
                rows.requires_grad_()
                x = plan.resize(rows, band)
            d = x.detach().softmax(dim=1)
            d *= coef
            d.scatter_add_(1, safe[:, None], -coef)
            grad[:, :, band.first:band.last] += torch.autograd.grad(
                x, rows, d)[0].to(plan.dtype)
            del x, d
        return grad


def average_factor(loss: CrossEntropyLoss, labels: Tensor,
                   class_weight: Optional[Tensor],
                   ignore_index: int) -> Union[int, Tensor]:
    """mmseg's ``avg_factor`` of a 'mean' cross-entropy: a pixel count
    without class weights, else a sum of them
    (:func:`class_weight_average`)."""
    ignored = labels == ignore_index
    if class_weight is None:
        if loss.avg_non_ignore:
            return labels.numel() - ignored.sum().item()
        return labels.numel()
    pixels, indexes_ignored = class_weight_average(bool(loss.avg_non_ignore))
    classes = len(class_weight)
    if indexes_ignored and ignored.any() and not (-classes <= ignore_index <
                                                  classes):
        raise IndexError(
            f'ignore_index {ignore_index} is not one of the {classes} '
            'classes: the installed mmseg\'s cross_entropy looks up the '
            'class weight of every label, ignored ones included, and fails '
            'here too (index out of bounds)')
    if pixels == 'every':
        return class_weight[labels].sum()
    return class_weight[labels[~ignored]].sum()


def banded_loss_by_feat(head: BaseDecodeHead, seg_logits: Tensor,
                        batch_data_samples: SampleList,
                        rows: int = DEFAULT_BAND_ROWS) -> Dict[str, Tensor]:
    """``head.loss_by_feat(seg_logits, batch_data_samples)``, ``rows``
    label rows at a time, in float32 at least (mmseg resizes in the
    logits' dtype: bfloat16 logits differ to bfloat16's precision)."""
    if int(rows) < 1:
        raise InputError(f'rows must be positive, got {rows}')
    labels = head._stack_batch_gt(batch_data_samples).squeeze(1)
    ignore_index = head.ignore_index
    dtype = torch.promote_types(seg_logits.dtype, torch.float32)
    entries = decode_losses(head)
    class_weights = [
        None if loss.class_weight is None else torch.as_tensor(
            loss.class_weight, dtype=dtype, device=seg_logits.device)
        for loss in entries
    ]
    plan = band_plan(seg_logits.shape[2:], labels.shape[1:],
                     head.align_corners, int(rows), dtype, seg_logits.device)
    sums, correct = BandedCrossEntropy.apply(seg_logits, labels, plan,
                                             class_weights, ignore_index)
    losses: Dict[str, Tensor] = {}
    for i, (loss, weight) in enumerate(zip(entries, class_weights)):
        value = sums[i]
        if loss.reduction == 'mean':
            value = value / (average_factor(loss, labels, weight,
                                            ignore_index) + MMSEG_EPS)
        value = loss.loss_weight * value
        name = loss.loss_name
        losses[name] = losses[name] + value if name in losses else value
    # mmseg's accuracy: 100 * correct / pixels not ignored, in float32
    kept = labels.numel() - (labels == ignore_index).sum().item()
    acc = correct.float().reshape(1) + MMSEG_EPS
    losses['acc_seg'] = acc.mul_(100.0 / (kept + MMSEG_EPS))
    return losses
