"""The decode loss in bands of label rows (banded_loss_by_feat,
BandedLossEncoderDecoder): mmseg's loss_by_feat's losses, accuracy and
gradients, without a class map at the label size."""
import math
import re
import warnings

import pytest
import torch
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.structures import SegDataSample

from _helpers import created_tensors, default_dtype
from mmseg_whitebox.models.losses import (DEFAULT_BAND_ROWS,
                                          banded_cross_entropy,
                                          banded_loss_by_feat,
                                          check_banded_loss)
from mmseg_whitebox.utils.tool_error import InputError

#: float64 comparisons: relative to the reference's largest entry
RTOL = 1e-6
CLASSES = 5
WEIGHTS = [0.5, 1.0, 2.0, 1.5, 0.7]
#: (logit size, label size): upsampling to a non-square label, a label
#: smaller than the logits, the same size
SIZES = [((6, 7), (23, 31)), ((12, 14), (7, 5)), ((9, 10), (9, 10))]


def build(cfg):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    with warnings.catch_warnings():  # mmseg's avg_non_ignore advice
        warnings.simplefilter('ignore')
        return MODELS.build(cfg)


def fcn_head(loss_decode, **kw):
    """mmseg's FCNHead: only its loss settings matter here."""
    return build(dict(type='FCNHead', in_channels=4, channels=4, num_convs=0,
                      concat_input=False, num_classes=CLASSES,
                      loss_decode=loss_decode, **kw))


def samples_of(labels):
    out = []
    for label in labels:
        sample = SegDataSample()
        sample.gt_sem_seg = PixelData(data=label[None])
        out.append(sample)
    return out


def random_case(logit_size, label_size, ignore_index, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, CLASSES, *logit_size, generator=gen,
                         dtype=torch.float64)
    labels = torch.randint(0, CLASSES, (2, *label_size), generator=gen)
    labels[torch.rand(labels.shape, generator=gen) < 0.2] = ignore_index
    return logits, samples_of(labels)


def losses_and_grad(fn, logits):
    """The loss dict and the gradient of its summed ``loss*`` entries with
    respect to the logits."""
    x = logits.clone().requires_grad_()
    out = fn(x)
    sum(v for k, v in out.items() if k.startswith('loss')).backward()
    return {k: v.detach() for k, v in out.items()}, x.grad


def relative_errors(ref, out):
    """Largest difference of each loss entry and of the gradient, relative
    to the reference's largest entry."""
    (ref_losses, ref_grad), (losses, grad) = ref, out
    assert list(losses) == list(ref_losses)
    errors = {k: ((losses[k] - v).abs().max() / v.abs().max()).item()
              for k, v in ref_losses.items()}
    errors['grad'] = ((grad - ref_grad).abs().max() /
                      ref_grad.abs().max()).item()
    return errors


def loss_entries(avg_non_ignore, class_weight):
    """Three CrossEntropyLoss entries: two of the same name (mmseg adds
    them), with and without class weights and avg_non_ignore, and a
    'sum' reduction."""
    return [
        dict(type='CrossEntropyLoss', loss_weight=0.7,
             class_weight=class_weight, avg_non_ignore=avg_non_ignore),
        dict(type='CrossEntropyLoss', loss_weight=0.3,
             avg_non_ignore=not avg_non_ignore),
        dict(type='CrossEntropyLoss', loss_weight=1e-3, reduction='sum',
             loss_name='loss_sum'),
    ]


@pytest.mark.parametrize('ignore_index', [255, 1])
@pytest.mark.parametrize('class_weight', [None, WEIGHTS])
@pytest.mark.parametrize('avg_non_ignore', [False, True])
@pytest.mark.parametrize('align_corners', [False, True])
def test_banded_loss_equals_mmseg_loss_by_feat(align_corners, avg_non_ignore,
                                               class_weight, ignore_index):
    """Losses, acc_seg and the gradient w.r.t. the logits equal mmseg's
    loss_by_feat to 1e-6 relative in float64, with ignored pixels (outside
    and inside the classes), class weights, non-square labels larger and
    smaller than the logits, bands of 4 rows (several per label, borders
    inside the logit rows). Where the installed mmseg fails (mmseg 1.2.2
    with class weights and ignore_index 255), so does the banded loss."""
    head = fcn_head(loss_entries(avg_non_ignore, class_weight),
                    align_corners=align_corners, ignore_index=ignore_index)
    for logit_size, label_size in SIZES:
        logits, samples = random_case(logit_size, label_size, ignore_index)
        try:
            ref = losses_and_grad(
                lambda x: head.loss_by_feat(x, samples), logits)
        except (IndexError, RuntimeError) as exc:
            # the same error, or the banded loss's own that names it
            # (onedl-mmsegmentation fails on every class-weighted
            # avg_non_ignore loss, which the banded loss refuses up front)
            with pytest.raises((type(exc), InputError)):
                losses_and_grad(lambda x: banded_loss_by_feat(
                    head, x, samples, rows=4), logits)
            continue
        out = losses_and_grad(
            lambda x: banded_loss_by_feat(head, x, samples, rows=4), logits)
        errors = relative_errors(ref, out)
        assert max(errors.values()) <= RTOL, (logit_size, label_size, errors)
        assert out[0]['acc_seg'].dtype == torch.float32


def test_banded_loss_comparison_sees_interpolation_and_band_errors(
        monkeypatch):
    """Sensitivity of the comparison above: the other align_corners, or
    bands that miss their last logit row, are far outside 1e-6."""
    head = fcn_head(loss_entries(True, None))
    logits, samples = random_case((6, 7), (23, 31), 255)
    ref = losses_and_grad(lambda x: head.loss_by_feat(x, samples), logits)

    head.align_corners = True
    out = losses_and_grad(
        lambda x: banded_loss_by_feat(head, x, samples, rows=4), logits)
    assert max(relative_errors(ref, out).values()) > 1e-3
    head.align_corners = False

    plan = banded_cross_entropy.band_plan

    def short_bands(*args, **kwargs):
        found = plan(*args, **kwargs)
        for band in found.bands:
            if band.last - band.first > 1:
                band.last -= 1
                band.weights = band.weights[:, :-1].contiguous()
        return found

    monkeypatch.setattr(banded_cross_entropy, 'band_plan', short_bands)
    out = losses_and_grad(
        lambda x: banded_loss_by_feat(head, x, samples, rows=4), logits)
    assert max(relative_errors(ref, out).values()) > 1e-3


def _class_maps(fn, classes, label_size):
    """Float tensors of at least classes x H x W elements that ``fn``
    creates (forward) and that the backward of its summed losses creates."""
    full = classes * label_size[0] * label_size[1]

    def big(created):
        return [shape for shape, dtype in created
                if dtype.is_floating_point and math.prod(shape) >= full]

    out, forward = created_tensors(fn)
    loss = sum(v for k, v in out.items() if k.startswith('loss'))
    _, backward = created_tensors(loss.backward)
    return big(forward), big(backward)


def test_banded_loss_creates_no_class_map_at_the_label_size():
    """Structural: no op of the banded loss, forward or backward, creates
    a float tensor as large as one image's class maps at the label size
    (its largest are bands of 8 rows of both images); mmseg's loss_by_feat
    does, in both passes, so the check sees such maps where they are
    made."""
    label_size = (40, 36)
    # class weights without avg_non_ignore: a loss both OpenMMLab stacks
    # compute (onedl-mmsegmentation fails on class-weighted avg_non_ignore)
    head = fcn_head(dict(type='CrossEntropyLoss', class_weight=WEIGHTS,
                         avg_non_ignore=False), ignore_index=1)
    logits, samples = random_case((6, 5), label_size, 1)
    logits.requires_grad_()
    forward, backward = _class_maps(
        lambda: banded_loss_by_feat(head, logits, samples, rows=8), CLASSES,
        label_size)
    assert forward == [] and backward == []
    logits.grad = None
    forward, backward = _class_maps(
        lambda: head.loss_by_feat(logits, samples), CLASSES, label_size)
    assert forward and backward


def test_banded_loss_runs_in_float32_under_autocast():
    """bfloat16 logits under CPU autocast: the resize and the losses run in
    float32 (mmseg's resize keeps bfloat16 there), the gradient comes back
    in bfloat16; the loss equals mmseg's float32 computation of the same
    bfloat16 logits to 1e-5, the gradient to bfloat16's precision."""
    head = fcn_head(dict(type='CrossEntropyLoss', avg_non_ignore=True))
    logits, samples = random_case((6, 7), (23, 31), 255)
    logits = logits.to(torch.bfloat16)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        losses, grad = losses_and_grad(
            lambda x: banded_loss_by_feat(head, x, samples, rows=4), logits)
    ref_losses, ref_grad = losses_and_grad(
        lambda x: head.loss_by_feat(x, samples), logits.float())
    assert losses['loss_ce'].dtype == torch.float32
    assert grad.dtype == torch.bfloat16
    torch.testing.assert_close(losses['loss_ce'], ref_losses['loss_ce'],
                               rtol=1e-5, atol=0)
    torch.testing.assert_close(grad.float(), ref_grad.to(torch.bfloat16)
                               .float(), rtol=1e-2, atol=1e-4)


# ----------------------------------------------------------- the segmentor
def tiny_segmentor(model_type, decode_head, aux_losses=None, **kw):
    """A one-layer, 24-wide ViT with 8x8 patches, ``decode_head`` and two
    auxiliary FCN heads (the second with align_corners and by default
    class weights), no dropout, float64. Label 0 is ignored (mmseg 1.2.2
    fails with class weights and an ignore_index outside the classes)."""
    loss = dict(type='CrossEntropyLoss', avg_non_ignore=True)
    if aux_losses is None:
        aux_losses = [dict(loss, loss_weight=0.4),
                      dict(loss, class_weight=WEIGHTS, avg_non_ignore=False)]
    fcn = dict(type='FCNHead', in_channels=24, channels=8, num_convs=1,
               concat_input=False, num_classes=CLASSES, dropout_ratio=0.0,
               ignore_index=0, norm_cfg=dict(type='BN', requires_grad=True))
    torch.manual_seed(0)
    model = build(dict(
        type=model_type,
        backbone=dict(type='VisionTransformer', img_size=(32, 40),
                      patch_size=8, embed_dims=24, num_layers=1, num_heads=2,
                      mlp_ratio=2, drop_path_rate=0.0, final_norm=True,
                      with_cls_token=True),
        decode_head=dict(decode_head, in_channels=24, channels=24,
                         num_classes=CLASSES, ignore_index=0,
                         loss_decode=loss),
        auxiliary_head=[dict(fcn, loss_decode=aux_losses[0]),
                        dict(fcn, align_corners=True,
                             loss_decode=aux_losses[1])],
        **kw))
    model.init_weights()
    return model.double().train()


HEADS = {
    'segmenter': dict(type='SegmenterMaskTransformerHead', num_layers=1,
                      num_heads=2, embed_dims=24, dropout_ratio=0.0,
                      drop_path_rate=0.0),
    'cbsa': dict(type='CBSAHead', num_layers=1, dropout_ratio=0.0,
                 attn_cfg=dict(type='CBSA', num_heads=2, head_dim=6,
                               rep_grid=(2, 2))),
}


@pytest.mark.parametrize('head', list(HEADS))
def test_banded_segmentor_equals_encoder_decoder(head):
    """BandedLossEncoderDecoder with mmseg's Segmenter head or the CBSA
    head and two auxiliary FCN heads: the same losses and accuracies and
    the same gradient of every parameter as EncoderDecoder with the same
    weights (float64, 1e-6 relative to each tensor's largest entry)."""
    ref_model = tiny_segmentor('EncoderDecoder', HEADS[head])
    model = tiny_segmentor('BandedLossEncoderDecoder', HEADS[head],
                           loss_band_rows=5)
    model.load_state_dict(ref_model.state_dict())
    gen = torch.Generator().manual_seed(1)
    inputs = torch.randn(2, 3, 32, 40, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, CLASSES, (2, 32, 40), generator=gen)
    labels[:, :3] = 0  # ignored
    samples = samples_of(labels)
    results = []
    for m in (ref_model, model):
        with default_dtype(torch.float64):
            losses = m.loss(inputs, samples)
        total, _ = m.parse_losses(losses)
        total.backward()
        results.append((losses, {n: p.grad for n, p in m.named_parameters()
                                 if p.grad is not None}))
    (ref_losses, ref_grads), (losses, grads) = results
    assert list(losses) == list(ref_losses)
    assert {'decode.loss_ce', 'aux_0.loss_ce', 'aux_1.acc_seg'} <= set(losses)
    for key, value in ref_losses.items():
        torch.testing.assert_close(losses[key], value, rtol=RTOL, atol=0)
    assert set(grads) == set(ref_grads)
    assert any(n.startswith('backbone.') for n in grads)
    for name, value in ref_grads.items():
        torch.testing.assert_close(grads[name], value, rtol=RTOL,
                                   atol=RTOL * value.abs().max().item(),
                                   msg=name)
    # sensitivity: a loss off by 1e-5 relative fails this tolerance
    with pytest.raises(AssertionError):
        torch.testing.assert_close(
            ref_losses['decode.loss_ce'] * (1 + 1e-5),
            ref_losses['decode.loss_ce'], rtol=RTOL, atol=0)


class _OwnLossHead(banded_cross_entropy.BaseDecodeHead):
    """A head computing its own loss: the banded loss cannot replace it."""

    def forward(self, inputs):
        return self.cls_seg(inputs[0])

    def loss_by_feat(self, seg_logits, batch_data_samples):
        return super().loss_by_feat(seg_logits, batch_data_samples)


@pytest.mark.parametrize('head_cfg, message', [
    (dict(sampler=dict(type='OHEMPixelSampler', thresh=0.7)),
     'pixel sampler'),
    (dict(loss_decode=dict(type='DiceLoss')), "CrossEntropyLoss only"),
    (dict(loss_decode=[dict(type='CrossEntropyLoss'),
                       dict(type='FocalLoss')]), 'CrossEntropyLoss only'),
    (dict(loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=True)),
     'softmax cross-entropy only'),
    (dict(loss_decode=dict(type='CrossEntropyLoss', reduction='none')),
     "'mean' or 'sum'"),
    (dict(loss_decode=dict(type='CrossEntropyLoss', class_weight=[1.0])),
     '1 class weights for 5 classes'),
])
def test_banded_loss_refuses_what_it_does_not_compute(head_cfg, message):
    cfg = dict(dict(loss_decode=dict(type='CrossEntropyLoss')), **head_cfg)
    with pytest.raises(ValueError, match=message):
        check_banded_loss(fcn_head(**cfg))


def test_banded_loss_refuses_a_head_with_its_own_loss():
    head = _OwnLossHead(in_channels=4, channels=4, num_classes=CLASSES)
    with pytest.raises(ValueError, match='overrides BaseDecodeHead'):
        check_banded_loss(head)
    check_banded_loss(fcn_head(dict(type='CrossEntropyLoss')))  # accepted


def test_segmentor_names_the_head_it_refuses_and_the_way_back():
    """A config error: the tools print it as one line (their
    user_error_message), naming the head, the reason and the way back."""
    from mmseg_whitebox.cli.errors import user_error_message
    dice = [dict(type='CrossEntropyLoss'), dict(type='DiceLoss')]
    with pytest.raises(ValueError) as info:
        tiny_segmentor('BandedLossEncoderDecoder', HEADS['segmenter'], dice)
    assert re.fullmatch(
        r'loss_band_rows: auxiliary_head\[1\]: FCNHead.loss_decode DiceLoss: '
        r'.*CrossEntropyLoss only; set loss_band_rows=None .*',
        user_error_message(info.value))
    with pytest.raises(ValueError, match='loss_band_rows must be positive'):
        tiny_segmentor('BandedLossEncoderDecoder', HEADS['segmenter'],
                       loss_band_rows=0)
    # off by default in BoundedMemoryEncoderDecoder: mmseg's loss, which
    # any head may have
    model = tiny_segmentor('BoundedMemoryEncoderDecoder', HEADS['segmenter'],
                           dice)
    assert model.loss_band_rows is None
    assert tiny_segmentor('BandedLossEncoderDecoder', HEADS['segmenter']
                          ).loss_band_rows == DEFAULT_BAND_ROWS
