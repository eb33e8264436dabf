"""onnxruntime against PyTorch on the CPU
(``tools/analysis_tools/benchmark_onnx.py``): the time from an image to
its prediction, :class:`~mmseg_whitebox.deployment.OnnxSegmentor` against
mmseg's ``inference_model``, whole-image inference.

Each model (random weights) is exported with ``--dynamic`` and both paths
predict the same image, end to end and the network alone, timed in
interleaved rounds, with the argmax agreement and the largest logit
difference.
"""
from __future__ import annotations

import os.path as osp
from dataclasses import asdict
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from mmseg_whitebox.deployment.onnx_export import (SegLogits,
                                                   check_can_export,
                                                   deployment_metadata,
                                                   export_onnx, image_parity)
from mmseg_whitebox.deployment.onnx_segmentor import OnnxSegmentor
from mmseg_whitebox.utils.atomic import write_json, write_text
from mmseg_whitebox.utils.run_lock import lock_folder

from . import benchmark as common

#: ADE20K's typical image size
DEFAULT_IMAGE = (512, 683)


def smooth_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A BGR uint8 image of regions and noise, the same for the same
    seed."""
    import cv2
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, height // 32), max(2, width // 32),
                                  3), dtype=np.uint8)
    image = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    noise = rng.integers(-12, 13, image.shape)
    return np.clip(image.astype(np.int64) + noise, 0, 255).astype(np.uint8)


def timed_calls(model: torch.nn.Module, segmentor: OnnxSegmentor,
                image: np.ndarray) -> Dict[str, Callable[[], object]]:
    """Both paths end to end, and the networks alone on the input the
    test resize and normalisation give."""
    from mmseg.apis import inference_model
    x, _ = segmentor.preprocess(image)
    graph = SegLogits(model).eval()
    tensor = torch.from_numpy(x)[None]

    def pytorch_network():
        with torch.no_grad():
            return graph(tensor)

    return {'pytorch': lambda: inference_model(model, image),
            'onnxruntime': lambda: segmentor(image),
            'pytorch_network': pytorch_network,
            'onnxruntime_network': lambda: segmentor.run(x)}


def measure(name: str, model: torch.nn.Module, segmentor: OnnxSegmentor,
            image: np.ndarray, options: common.BenchmarkOptions) -> Dict:
    """One row: ``segmentor`` checked against ``model`` on ``image``, and
    both timed."""
    parity = image_parity(model, segmentor, image)
    times = common.time_interleaved(
        timed_calls(model, segmentor, image), torch.device('cpu'),
        options.repeats, options.warmup, options.max_seconds)
    ms = {k: 1e3 * common.median(v) for k, v in times.items()}
    x, _ = segmentor.preprocess(image)
    return dict(model=name, config=segmentor.metadata['config'],
                image=f'{image.shape[0]}x{image.shape[1]}',
                network_input=f'{x.shape[1]}x{x.shape[2]}',
                calls=len(times['pytorch']),
                **{f'{k}_ms': v for k, v in ms.items()},
                ratio=ms['onnxruntime'] / ms['pytorch'],
                network_ratio=(ms['onnxruntime_network'] /
                               ms['pytorch_network']),
                parity=asdict(parity))


def describe(row: Dict) -> str:
    """One line of a row: both times, their ratio, the agreement."""
    parity = row['parity']
    return (f'{row["model"]}: image {row["image"]} (network '
            f'{row["network_input"]}): PyTorch {row["pytorch_ms"]:.1f} ms, '
            f'onnxruntime {row["onnxruntime_ms"]:.1f} ms, ratio '
            f'{row["ratio"]:.2f}; network alone '
            f'{row["pytorch_network_ms"]:.1f} vs '
            f'{row["onnxruntime_network_ms"]:.1f} ms, ratio '
            f'{row["network_ratio"]:.2f}; argmax agreement '
            f'{100 * parity["argmax_agreement"]:.3f}%, max |logit diff| '
            f'{parity["relative_diff"]:.1g} of the largest logit')


def benchmark_onnx(configs: Dict[str, str], out_dir: str,
                   image_hw: Tuple[int, int] = DEFAULT_IMAGE,
                   threads: Optional[int] = None,
                   options: Optional[common.BenchmarkOptions] = None,
                   log=print) -> Dict:
    """Rows of :func:`measure` for every ``name: config`` on one
    :func:`smooth_image` of ``image_hw``; ``threads`` for torch and
    onnxruntime alike. Writes ``benchmark.json``, ``benchmark.md`` and
    the graphs to ``out_dir``; returns the report."""
    check_can_export()  # before any model is built
    options = options or common.BenchmarkOptions(repeats=5, warmup=1,
                                                 max_seconds=None)
    with lock_folder(out_dir, '--out'):
        device, _ = common.prepare_run('cpu', threads, None)
        facts = common.machine(device)
        log(common.machine_line(facts, 'onnxruntime vs PyTorch, whole-image '
                                'inference', None))
        image = smooth_image(*image_hw, seed=options.seed)
        models = common.build_models(configs, device, options.seed,
                                     {'model.test_cfg.mode': 'whole'})
        rows: List[Dict] = []
        for name, model in models.items():
            path = osp.join(out_dir, f'{name}.onnx')
            crop = tuple(model.cfg.get('crop_size', None) or (512, 512))
            export_onnx(model, path, crop, dynamic=True,
                        metadata=deployment_metadata(model))
            segmentor = OnnxSegmentor(path, threads=threads)
            rows.append(measure(name, model, segmentor, image, options))
            log(describe(rows[-1]))
        report = dict(machine=facts, image=list(image_hw),
                      repeats=options.repeats, results=rows)
        write_json(osp.join(out_dir, 'benchmark.json'), report)
        write_text(osp.join(out_dir, 'benchmark.md'),
                   '\n'.join(describe(r) for r in rows) + '\n')
        return report
