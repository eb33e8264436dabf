"""Shared-encoder sweeps: many noise settings of the decode head in one pass
over the data.

Noise on decode-head parameters leaves the encoder's output unchanged, and
the encoder is most of the compute. :class:`SharedEncoderEvaluation`
therefore evaluates a chunk of noise settings (sigma x draw) together: per
batch the encoder (``extract_feat``: backbone + neck) runs once per image
-- once per window in slide mode -- and every perturbed copy of the head
runs on those features, each feeding its own copy of the test evaluator
(mmseg's ``IoUMetric``).

Per head copy, what follows the encoder is mmseg's prediction: for an
``EncoderDecoder`` evaluated with ``IoUMetric`` (the configs here),
:class:`~.shared_inference.HeadInference` computes it from the head's
window logits without mmseg's fresh full-size maps, bit for bit the same;
for any other segmentor or metric, the segmentor's own ``predict``
(``slide_inference``/``whole_inference``, ``encode_decode``,
``postprocess_result``) runs on a *view* of the segmentor, a shallow copy
whose ``decode_head`` is the perturbed copy and whose ``extract_feat``
returns the features the first copy computed, window by window in the
same order. The head copies are ``deepcopy``s of the real head with
:class:`~.perturbation.ParameterNoise` applied exactly as the
one-setting-at-a-time path applies it (same seed, same order), so the
results are identical; the real model is only read, never modified.
"""
from __future__ import annotations

import copy
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterator, List, Optional,
                    Sequence, Tuple)

import torch
import torch.nn as nn

from mmseg_whitebox.compat import module_view
from mmseg_whitebox.engine.hooks import count_nonfinite
from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.logs import quiet_logging
from mmseg_whitebox.utils.per_image import gather_images
from .perturbation import ParameterNoise
from .shared_inference import HeadInference, fast_path_unsupported

#: what every evaluation of the robustness tools returns
Metrics = Dict[str, float]


@dataclass
class NoiseSetting:
    """One noise draw: the real model's ``(name, parameter)`` pairs to
    perturb (all in the decode head), and the draw's sigma, mode and seed
    (as :class:`~.perturbation.ParameterNoise` takes them)."""

    parameters: Sequence[Tuple[str, nn.Parameter]]
    sigma: float
    mode: str = 'absolute'
    seed: int = 0


def shared_encoder_unsupported(model: nn.Module,
                               parameters: Sequence[Tuple[str, nn.Parameter]]
                               ) -> Optional[str]:
    """Why ``parameters`` cannot be swept with a shared encoder (``None``
    if they can): the model must be an mmseg ``EncoderDecoder`` and every
    parameter must lie in its decode head, or the encoder's output would
    change with the noise."""
    from mmseg.models.segmentors import EncoderDecoder
    model = unwrap_model(model)
    if not isinstance(model, EncoderDecoder):
        return (f'the model is a {type(model).__name__}, not an mmseg '
                'EncoderDecoder')
    head = {id(p) for p in model.decode_head.parameters()}
    outside = list(dict.fromkeys(n for n, p in parameters
                                 if id(p) not in head))
    if outside:
        shown = ', '.join(outside[:3]) + (
            f' (+{len(outside) - 3} more)' if len(outside) > 3 else '')
        return f'perturbed parameters outside the decode head: {shown}'
    return None


class _FeatureCache:
    """``extract_feat`` for the views of one batch: the first view runs the
    real encoder and keeps its output per call (per window); the others get
    those features back, call by call."""

    def __init__(self, encoder: Callable[[torch.Tensor], Any]) -> None:
        self.encoder = encoder
        self.calls: List[Tuple[torch.Size, Any, List[int]]] = []

    @staticmethod
    def _tensors(feats: Any) -> List[torch.Tensor]:
        if isinstance(feats, torch.Tensor):
            return [feats]
        if isinstance(feats, (list, tuple)):
            return [t for f in feats for t in _FeatureCache._tensors(f)]
        return []

    def record(self, inputs: torch.Tensor) -> Any:
        feats = self.encoder(inputs)
        self.calls.append((inputs.shape, feats,
                           [t._version for t in self._tensors(feats)]))
        return feats

    def replayer(self) -> Callable[[torch.Tensor], Any]:
        position = iter(range(len(self.calls)))

        def replay(inputs: torch.Tensor) -> Any:
            i = next(position, None)
            if i is None or self.calls[i][0] != inputs.shape:
                raise RuntimeError(
                    'shared-encoder sweep: the head copies asked for other '
                    'encoder inputs than the first one (inference is not '
                    'deterministic in its windows); use --no-shared-encoder')
            return self.calls[i][1]

        return replay

    def check_unchanged(self) -> None:
        """The heads must not modify their input features in place (the
        next head would see them changed)."""
        for _, feats, versions in self.calls:
            if [t._version for t in self._tensors(feats)] != versions:
                raise RuntimeError(
                    'shared-encoder sweep: the decode head modifies its '
                    'input features in place, so they cannot be shared; use '
                    '--no-shared-encoder')


def _segmentor_view(model: nn.Module, head: nn.Module,
                    extract_feat: Callable[[torch.Tensor], Any]) -> nn.Module:
    """A shallow copy of the segmentor with another decode head and
    encoder, so that its own inference code runs unchanged (the real
    segmentor's attributes are not touched;
    :func:`~mmseg_whitebox.compat.module_view`)."""
    view = module_view(model, decode_head=head)
    view.extract_feat = extract_feat
    return view


def _nonfinite(outputs: Sequence[Any]) -> List[Tuple[int, int]]:
    """Non-finite and total logits of each image, as
    :class:`~mmseg_whitebox.engine.hooks.NonFiniteCounter` counts them."""
    counts = []
    for sample in outputs:
        logits = getattr(sample, 'seg_logits', None)
        counts.append((0, 0) if logits is None else
                      (count_nonfinite(logits.data), logits.data.numel()))
    return counts


class SharedEncoderEvaluation:
    """Evaluates noise settings of the decode head with one encoder pass
    per chunk of settings (see module docstring).

    Args:
        model: the segmentor (an mmseg ``EncoderDecoder``, possibly
            wrapped for distributed evaluation); only read.
        dataloader: the test dataloader.
        evaluator: the test evaluator (mmengine ``Evaluator``); a fresh
            deep copy accumulates each setting.
        max_heads: perturbed head copies held at a time, i.e. settings per
            pass over the data (bounds the memory).
        fp16: run under autocast as ``TestLoop(fp16=True)`` does.
        quiet: silence the metric's per-class tables.
    """

    def __init__(self, model: nn.Module, dataloader: Any, evaluator: Any,
                 max_heads: int = 8, fp16: bool = False,
                 quiet: bool = True) -> None:
        if max_heads < 1:
            raise ValueError(f'max_heads must be >= 1, got {max_heads}')
        self.model = model
        self.dataloader = dataloader
        self.evaluator = evaluator
        self.max_heads = int(max_heads)
        self.fp16 = fp16
        self.quiet = quiet

    def unsupported(self, parameters: Sequence[Tuple[str, nn.Parameter]]
                    ) -> Optional[str]:
        """See :func:`shared_encoder_unsupported`."""
        return shared_encoder_unsupported(self.model, parameters)

    def _fresh_evaluator(self) -> Any:
        evaluator = copy.deepcopy(self.evaluator)
        for metric in getattr(evaluator, 'metrics', []):
            metric.results.clear()
        return evaluator

    def _perturbed_head(self, setting: NoiseSetting,
                        stack: ExitStack) -> nn.Module:
        head = unwrap_model(self.model).decode_head
        twin = copy.deepcopy(head)
        twins = dict(zip((id(p) for p in head.parameters()),
                         twin.parameters()))
        try:
            params = [(n, twins[id(p)]) for n, p in setting.parameters]
        except KeyError as exc:
            raise ValueError(
                'shared-encoder sweep: ' + (self.unsupported(
                    setting.parameters) or 'parameter not in the head')
            ) from exc
        stack.enter_context(ParameterNoise(params, setting.sigma,
                                           setting.mode, setting.seed))
        return twin

    def _run_views(self, model: nn.Module, heads: Sequence[nn.Module],
                   data: dict) -> Iterator[Tuple[list, list]]:
        """Per head: mmseg's own ``predict`` on a view of the segmentor
        (the encoder's features recorded by the first, replayed to the
        others); the non-finite and total logits of each image and the
        outputs."""
        from mmengine.runner.amp import autocast
        cache = _FeatureCache(model.extract_feat)
        for i, head in enumerate(heads):
            view = _segmentor_view(model, head, cache.record if i == 0
                                   else cache.replayer())
            samples = copy.deepcopy(data['data_samples'])
            with autocast(enabled=self.fp16):
                outputs = view.predict(data['inputs'], samples)
            cache.check_unchanged()
            yield _nonfinite(outputs), outputs

    def _run_fast(self, model: nn.Module, heads: Sequence[nn.Module],
                  data: dict, fast: HeadInference
                  ) -> Iterator[Tuple[int, int, list]]:
        """As :meth:`_run_views`, with :class:`~.shared_inference.
        HeadInference` after the encoder; the outputs hold what
        ``IoUMetric`` reads."""
        from mmengine.runner.amp import autocast
        from mmengine.structures import PixelData
        from mmseg.structures import SegDataSample
        inputs, samples = data['inputs'], data['data_samples']
        metas = [s.metainfo for s in samples]
        windows = fast.windows(inputs)
        cache = _FeatureCache(model.extract_feat)
        with autocast(enabled=self.fp16):
            features = [cache.record(inputs if w is None else
                                     inputs[:, :, w[0]:w[1], w[2]:w[3]])
                        for w in windows]
        for head in heads:
            with autocast(enabled=self.fp16):
                logits = fast.seg_logits(head, inputs, metas, windows,
                                         features)
                predicted = fast.predictions(logits, samples)
            cache.check_unchanged()
            outputs, counts = [], []
            for sample, (pred, nonfinite, values) in zip(samples,
                                                         predicted):
                out = SegDataSample(metainfo=sample.metainfo)
                if 'gt_sem_seg' in sample:
                    out.gt_sem_seg = sample.gt_sem_seg
                out.pred_sem_seg = PixelData(data=pred)
                outputs.append(out)
                counts.append((nonfinite, values))
            yield counts, outputs

    def __call__(self, settings: Sequence[NoiseSetting]) -> List[Metrics]:
        """The test metrics of each setting (plus ``nonfinite_fraction``),
        from one pass over the data; at most ``max_heads`` settings."""
        if not settings:
            return []
        if len(settings) > self.max_heads:
            raise ValueError(f'{len(settings)} settings in one pass, more '
                             f'than max_heads={self.max_heads}')
        from mmengine.runner.amp import autocast
        model = unwrap_model(self.model)
        model.eval()
        fast = (HeadInference(model) if fast_path_unsupported(
            model, self.evaluator) is None else None)
        with ExitStack() as stack, torch.no_grad():
            heads = [self._perturbed_head(s, stack) for s in settings]
            evaluators = [self._fresh_evaluator() for _ in settings]
            counts: List[List[Tuple[int, int]]] = [[] for _ in settings]
            for batch in self.dataloader:
                with autocast(enabled=self.fp16):
                    data = model.data_preprocessor(batch, False)
                runs = (self._run_fast(model, heads, data, fast) if fast
                        else self._run_views(model, heads, data))
                for i, (images, outputs) in enumerate(runs):
                    counts[i] += images
                    evaluators[i].process(data_samples=outputs,
                                          data_batch=batch)
            size = len(self.dataloader.dataset)
            results = []
            for evaluator, images in zip(evaluators, counts):
                with quiet_logging() if self.quiet else nullcontext():
                    metrics = evaluator.evaluate(size)
                metrics = {k: float(v) for k, v in metrics.items()}
                # every rank's images, the padding dropped, as the metric
                images = gather_images(images, size)
                total = sum(values for _, values in images)
                metrics['nonfinite_fraction'] = sum(
                    bad for bad, _ in images) / total if total else 0.0
                results.append(metrics)
        return results
