"""Shared-encoder sweeps: many noise settings of the decode head in one pass
over the data.

Noise on decode-head parameters leaves the encoder's output unchanged, and
the encoder is most of the compute. :class:`SharedEncoderEvaluation` runs
the encoder (``extract_feat``) once per batch (per window in slide mode)
for a chunk of settings, and every perturbed copy of the head -- a
``deepcopy`` with :class:`~.perturbation.ParameterNoise` applied exactly
as one draw at a time applies it -- on those features, each feeding its
own copy of the test evaluator. After the head, each copy makes mmseg's
prediction with :class:`~.shared_inference.HeadInference`, or, where that
does not apply, with the segmentor's own ``predict`` on a view of it whose
``decode_head`` is the copy and whose ``extract_feat`` replays the
recorded features. The results are those of one draw at a time; the real
model is only read.
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
from mmseg_whitebox.engine.hooks import NonFiniteCounter
from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.logs import quiet_logging
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
    parameter in its decode head."""
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
    """``extract_feat`` for the views of one batch: the first records the
    real encoder's output per call (per window), the others replay it."""

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
        """The heads must not modify their input features in place."""
        for _, feats, versions in self.calls:
            if [t._version for t in self._tensors(feats)] != versions:
                raise RuntimeError(
                    'shared-encoder sweep: the decode head modifies its '
                    'input features in place, so they cannot be shared; use '
                    '--no-shared-encoder')


class SharedEncoderEvaluation:
    """Evaluates noise settings of the decode head with one encoder pass
    per chunk of settings (see module docstring).

    Args:
        model: the segmentor (an mmseg ``EncoderDecoder``, possibly
            wrapped); only read.
        dataloader: the test dataloader.
        evaluator: the test ``Evaluator``; a deep copy per setting.
        max_heads: head copies at a time, i.e. settings per pass over the
            data (bounds the memory).
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
                   data: dict, counters: Sequence[NonFiniteCounter]
                   ) -> Iterator[list]:
        """Per head, the outputs of mmseg's own ``predict`` on a view of
        the segmentor (:func:`~mmseg_whitebox.compat.module_view`)."""
        from mmengine.runner.amp import autocast
        cache = _FeatureCache(model.extract_feat)
        for i, (head, counter) in enumerate(zip(heads, counters)):
            view = module_view(model, decode_head=head)
            view.extract_feat = cache.record if i == 0 else cache.replayer()
            samples = copy.deepcopy(data['data_samples'])
            with autocast(enabled=self.fp16):
                outputs = view.predict(data['inputs'], samples)
            cache.check_unchanged()
            counter.count(outputs)
            yield outputs

    def _run_fast(self, model: nn.Module, heads: Sequence[nn.Module],
                  data: dict, counters: Sequence[NonFiniteCounter],
                  fast: HeadInference) -> Iterator[list]:
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
        for head, counter in zip(heads, counters):
            with autocast(enabled=self.fp16):
                logits = fast.seg_logits(head, inputs, metas, windows,
                                         features)
                predicted = fast.predictions(logits, samples)
            cache.check_unchanged()
            outputs = []
            for sample, (pred, nonfinite, values) in zip(samples,
                                                         predicted):
                out = SegDataSample(metainfo=sample.metainfo)
                if 'gt_sem_seg' in sample:
                    out.gt_sem_seg = sample.gt_sem_seg
                out.pred_sem_seg = PixelData(data=pred)
                outputs.append(out)
                counter.per_image.append((nonfinite, values))
            yield outputs

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
            counters = [NonFiniteCounter() for _ in settings]
            for batch in self.dataloader:
                with autocast(enabled=self.fp16):
                    data = model.data_preprocessor(batch, False)
                runs = (self._run_fast(model, heads, data, counters, fast)
                        if fast else
                        self._run_views(model, heads, data, counters))
                for outputs, evaluator in zip(runs, evaluators):
                    evaluator.process(data_samples=outputs, data_batch=batch)
            size = len(self.dataloader.dataset)
            results = []
            for evaluator, counter in zip(evaluators, counters):
                with quiet_logging() if self.quiet else nullcontext():
                    metrics = evaluator.evaluate(size)
                metrics = {k: float(v) for k, v in metrics.items()}
                metrics['nonfinite_fraction'] = counter.fraction_over_ranks(
                    size)
                results.append(metrics)
        return results
