"""Peak resident memory of inference on one large image, mmseg's
``EncoderDecoder`` against :class:`~mmseg_whitebox.models.segmentors.
BoundedMemoryEncoderDecoder`, and how often their predictions agree
(``tools/analysis_tools/large_image_memory.py``).

Each measurement runs in a fresh interpreter (``python -m
mmseg_whitebox.analysis.large_image_memory SPEC``), so that its ``VmHWM``
belongs to one path; its address space can be capped (``RLIMIT_AS``), so
that mmseg's path fails to allocate instead of driving a small machine
into swapping or the OOM killer.
"""
from __future__ import annotations

import json
import os
import os.path as osp
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from mmseg_whitebox.utils.atomic import write_json
from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint
from mmseg_whitebox.utils.tool_error import ToolError
from .memory import available_memory, peak_memory, proc_bytes

BOUNDED_TYPE = 'BoundedMemoryEncoderDecoder'
GIB = 1024 ** 3


def write_test_image(path: str, height: int, width: int,
                     seed: int = 0) -> str:
    """A smooth random colour image (regions and gradients, not noise) of
    ``height`` x ``width`` saved as ``path`` (JPEG or PNG by suffix)."""
    import cv2
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 200),
                                       max(2, width // 200), 3),
                         dtype=np.uint8)
    img = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    if not cv2.imwrite(path, img):
        raise OSError(f'could not write {path!r}')
    return path


def model_options(bounded: bool, mode: Optional[str],
                  options: Optional[Dict[str, Any]] = None
                  ) -> Dict[str, Any]:
    """``cfg_options`` of ``init_model`` for one path."""
    opts: Dict[str, Any] = dict(options or {})
    if bounded:
        opts['model.type'] = BOUNDED_TYPE
    if mode is not None:
        opts['model.test_cfg.mode'] = mode
    return opts


def build_model(config: str, checkpoint: Optional[str], bounded: bool,
                mode: Optional[str], seed: int = 0,
                options: Optional[Dict[str, Any]] = None):
    """The model of ``config`` on the CPU, from ``checkpoint`` or with
    random weights drawn from ``seed``."""
    import torch
    from mmseg.apis import init_model
    torch.manual_seed(seed)
    return init_model(config, checkpoint, device='cpu',
                      cfg_options=model_options(bounded, mode, options))


def measure(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run one inference as ``spec`` says, in this process; returns its
    peak RSS (``VmHWM``) and the rise of it during inference."""
    import torch
    from mmseg.apis import inference_model
    if spec.get('threads'):
        torch.set_num_threads(int(spec['threads']))
    model = build_model(spec['config'], spec.get('checkpoint'),
                        spec['bounded'], spec.get('mode'),
                        options=spec.get('options'))
    limit = spec.get('memory_limit')
    if limit:  # address space now plus the allowance
        vm = proc_bytes('VmSize') or 0
        resource.setrlimit(resource.RLIMIT_AS,
                           (vm + int(limit), resource.RLIM_INFINITY))
    start = time.perf_counter()
    try:
        with torch.no_grad():
            rise, result = peak_memory(
                lambda: inference_model(model, spec['image']),
                torch.device('cpu'))
    except (MemoryError, RuntimeError) as exc:
        if 'memory' not in str(exc).lower() and not isinstance(
                exc, MemoryError):
            raise
        return dict(ok=False, error=str(exc).splitlines()[0][:300],
                    peak_rss=proc_bytes('VmHWM'))
    seconds = time.perf_counter() - start
    pred = result.pred_sem_seg.data
    out = dict(ok=True, seconds=seconds, inference_rise=rise,
               peak_rss=proc_bytes('VmHWM'),
               pred_shape=list(pred.shape),
               seg_logits_shape=list(result.seg_logits.data.shape))
    if spec.get('save_pred'):
        np.save(spec['save_pred'], pred.squeeze(0).numpy().astype(np.int16))
    return out


def measure_in_subprocess(spec: Dict[str, Any],
                          timeout: float = 3600) -> Dict[str, Any]:
    """:func:`measure` in a fresh interpreter (its own ``VmHWM``)."""
    proc = subprocess.run(
        [sys.executable, '-m', 'mmseg_whitebox.analysis.large_image_memory',
         json.dumps(spec)], capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        if proc.returncode < 0:
            return dict(ok=False, peak_rss=None,
                        error=f'killed by signal {-proc.returncode} '
                        '(out of memory?)')
        raise RuntimeError(f'the measurement failed ({proc.returncode}):\n'
                           f'{tail}')
    return json.loads(lines[-1])


def agreement(config: str, checkpoint: Optional[str], height: int,
              width: int, mode: Optional[str] = None, seed: int = 0,
              options: Optional[Dict[str, Any]] = None
              ) -> Tuple[float, Dict[str, Any]]:
    """Fraction of pixels where both paths predict the same class on a
    ``height`` x ``width`` image, the shapes each stored and how many
    classes the prediction holds (one class makes agreement trivial)."""
    import torch
    from mmseg.apis import inference_model
    default = build_model(config, checkpoint, False, mode, seed, options)
    bounded = build_model(config, checkpoint, True, mode, seed, options)
    bounded.load_state_dict(default.state_dict())
    with tempfile.TemporaryDirectory() as tmp:
        image = write_test_image(osp.join(tmp, 'image.png'), height, width,
                                 seed)
        with torch.no_grad():
            a = inference_model(default, image)
            b = inference_model(bounded, image)
    same = (a.pred_sem_seg.data == b.pred_sem_seg.data).double().mean()
    return float(same), dict(
        pred_shape=list(b.pred_sem_seg.data.shape),
        classes=int(b.pred_sem_seg.data.unique().numel()),
        default_seg_logits=list(a.seg_logits.data.shape),
        bounded_seg_logits=list(b.seg_logits.data.shape))


def format_bytes(n: Optional[int]) -> str:
    return 'n/a' if n is None else f'{n / GIB:.2f} GiB'


if __name__ == '__main__':
    print(json.dumps(measure(json.loads(sys.argv[1]))))
    sys.stdout.flush()
    os._exit(0)  # skip freeing a large heap at exit


def large_image_memory_report(config: str,
                              checkpoint: Optional[str] = None,
                              size: Sequence[int] = (3000, 4000),
                              mode: Optional[str] = None,
                              paths: Sequence[str] = ('mmseg', 'bounded'),
                              memory_limit_gb: Optional[float] = None,
                              agreement_size: Sequence[int] = (300, 420),
                              threads: Optional[int] = None,
                              cfg_options: Optional[Dict] = None,
                              json_file: Optional[str] = None) -> Dict:
    """What ``tools/analysis_tools/large_image_memory.py`` does: peak RSS
    of inference on one ``size`` (height, width) image along each of
    ``paths`` (``'mmseg'``, capped at ``memory_limit_gb``, default 85% of
    the free memory; ``'bounded'``), each in a fresh process, and their
    agreement on that image and on an ``agreement_size`` one. Random
    weights without ``checkpoint``. Returns the results (also written to
    ``json_file`` if given)."""
    check_checkpoint(checkpoint)
    from mmseg_whitebox.engine.config import read_config
    read_config(config, cfg_options)  # missing: a ToolError
    options = dict(cfg_options or {})
    if min(list(size) + list(agreement_size)) < 1:
        raise ToolError('--shape and --agreement-shape take positive sizes')
    if memory_limit_gb is not None and memory_limit_gb <= 0:
        raise ToolError('--memory-limit-gb must be positive')
    import torch
    limit = (memory_limit_gb * GIB if memory_limit_gb else
             0.85 * (available_memory(torch.device('cpu')) or 0)) or None
    height, width = size
    results: Dict[str, Any] = dict(config=config, checkpoint=checkpoint,
                                   size=[height, width], mode=mode, paths={})
    with tempfile.TemporaryDirectory() as tmp:
        image = write_test_image(osp.join(tmp, 'large.jpg'), height, width)
        for path in paths:
            spec = dict(config=config, checkpoint=checkpoint, image=image,
                        bounded=path == 'bounded', mode=mode,
                        threads=threads, options=options,
                        save_pred=osp.join(tmp, f'{path}.npy'),
                        memory_limit=limit if path == 'mmseg' else None)
            res = measure_in_subprocess(spec)
            results['paths'][path] = res
            if res['ok']:
                print(f'{path:8s} {height}x{width}: peak RSS '
                      f'{format_bytes(res["peak_rss"])} (rise during '
                      f'inference {format_bytes(res["inference_rise"])}), '
                      f'{res["seconds"]:.1f} s, seg_logits '
                      f'{res["seg_logits_shape"]}')
            else:
                print(f'{path:8s} {height}x{width}: failed: {res["error"]} '
                      f'(peak RSS {format_bytes(res["peak_rss"])}'
                      + (f', limit {format_bytes(int(limit))}'
                         if spec['memory_limit'] else '') + ')')
        if all(results['paths'].get(p, {}).get('ok')
               for p in ('mmseg', 'bounded')):
            a = np.load(osp.join(tmp, 'mmseg.npy'))
            b = np.load(osp.join(tmp, 'bounded.npy'))
            results['large_agreement'] = float((a == b).mean())
            print(f'agreement {height}x{width}: '
                  f'{100 * results["large_agreement"]:.4f}% of pixels')
    ah, aw = agreement_size
    same, shapes = agreement(config, checkpoint, ah, aw, mode,
                             options=options)
    results['agreement'] = dict(size=[ah, aw], fraction=same, **shapes)
    print(f'agreement {ah}x{aw}: {100 * same:.4f}% of pixels, '
          f'{shapes["classes"]} classes predicted (seg_logits '
          f'mmseg {shapes["default_seg_logits"]}, bounded '
          f'{shapes["bounded_seg_logits"]})')
    if json_file:
        write_json(json_file, results, indent=2)
    return results
