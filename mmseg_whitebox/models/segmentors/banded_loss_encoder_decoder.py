"""An ``EncoderDecoder`` whose training loss never holds the logits of
every class at the label size (150 classes at 1024x1024: 600 MB per image,
and as much for their softmax and gradient). The decode and auxiliary
heads' losses come from
:func:`~mmseg_whitebox.models.losses.banded_loss_by_feat`: the same losses,
``acc_seg`` and gradients up to summation order. Prediction, weights and
checkpoints are ``EncoderDecoder``'s. Any head whose loss is
``BaseDecodeHead``'s with ``CrossEntropyLoss`` entries qualifies; others
are refused when the model is built.
"""
from typing import List, Optional

from mmseg.models.segmentors import EncoderDecoder
from mmseg.registry import MODELS
from mmseg.utils import SampleList, add_prefix
from torch import Tensor, nn

from mmseg_whitebox.utils.tool_error import InputError

from ..losses import (DEFAULT_BAND_ROWS, banded_loss_by_feat,
                      check_banded_loss)


@MODELS.register_module()
class BandedLossEncoderDecoder(EncoderDecoder):
    """``EncoderDecoder`` with the heads' training losses computed in bands
    of label rows.

    Args:
        loss_band_rows: label rows per band; ``None``: mmseg's loss.
    """
    #: label rows per band; None: mmseg's loss
    loss_band_rows: Optional[int] = None

    def __init__(self, *args,
                 loss_band_rows: Optional[int] = DEFAULT_BAND_ROWS,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if loss_band_rows is not None:
            if int(loss_band_rows) <= 0:
                raise InputError('loss_band_rows must be positive, '
                                 f'got {loss_band_rows}')
            loss_band_rows = int(loss_band_rows)
            for name, head in self._loss_heads():
                try:
                    check_banded_loss(head)
                except InputError as exc:
                    raise InputError(
                        f'loss_band_rows: {name}: {exc}; set '
                        'loss_band_rows=None (or model.type='
                        'EncoderDecoder) to keep mmseg\'s loss') from exc
        self.loss_band_rows = loss_band_rows

    def _loss_heads(self) -> List[tuple]:
        """``(name, head)`` of every head that computes a training loss."""
        heads = [('decode_head', self.decode_head)]
        if self.with_auxiliary_head:
            aux = self.auxiliary_head
            heads += ([(f'auxiliary_head[{i}]', h) for i, h in enumerate(aux)]
                      if isinstance(aux, nn.ModuleList)
                      else [('auxiliary_head', aux)])
        return heads

    def _head_loss(self, head: nn.Module, inputs: List[Tensor],
                   data_samples: SampleList) -> dict:
        """``head.loss``, banded when switched on."""
        if self.loss_band_rows is None:
            return head.loss(inputs, data_samples, self.train_cfg)
        return banded_loss_by_feat(head, head.forward(inputs), data_samples,
                                   self.loss_band_rows)

    def _decode_head_forward_train(self, inputs: List[Tensor],
                                   data_samples: SampleList) -> dict:
        return add_prefix(
            self._head_loss(self.decode_head, inputs, data_samples),
            'decode')

    def _auxiliary_head_forward_train(self, inputs: List[Tensor],
                                      data_samples: SampleList) -> dict:
        if not isinstance(self.auxiliary_head, nn.ModuleList):
            return add_prefix(
                self._head_loss(self.auxiliary_head, inputs, data_samples),
                'aux')
        losses = dict()
        for idx, aux_head in enumerate(self.auxiliary_head):
            losses.update(add_prefix(
                self._head_loss(aux_head, inputs, data_samples),
                f'aux_{idx}'))
        return losses
