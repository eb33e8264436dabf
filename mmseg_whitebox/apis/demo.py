"""The embedded demo behind ``make demo`` as one call, on CPU.

:func:`run_demo` does in this process what a user would do with the
tools:

1. writes the synthetic ADE20K-layout dataset, context variant (a shape's
   class depends on a landmark elsewhere in the image);
2. trains each demo model (:data:`~.demo_models.DEMO_MODELS`) as
   ``tools/train.py`` does; a finished run is reused unless ``retrain``;
3. tests each as ``tools/test.py`` does: mIoU next to chance level,
   decoder parameters and GFLOPs at 512x512;
4. saves a single-image overlay (ground truth | prediction);
5. sweeps each model over decoder-attention noise as
   ``tools/noise_robustness.py`` does and plots the sweeps together.

The encoder keeps its random initialisation (unless ``train_encoder``), so
the context the task needs must be gathered by the decoder's attention:
every compared attention is in use, and a robustness claim about it is
informative. :func:`format_demo_results` is the table the tool prints.
"""
from __future__ import annotations

import json
import os
import os.path as osp
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence

from mmseg_whitebox.datasets.synthetic_ade20k import (
    SyntheticADE20KSpec, chance_miou, generate_synthetic_ade20k, load_meta,
    sample_name)
from mmseg_whitebox.engine.hooks import LAST_CHECKPOINT
from mmseg_whitebox.engine.model_index import config_path
from mmseg_whitebox.engine.runner_config import (ensure_custom_hook,
                                                 runner_config)
from mmseg_whitebox.utils.atomic import write_json
from mmseg_whitebox.utils.input_checks import check_writable_folder
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import InputError
from .demo_models import (DEFAULT_MODELS, DEMO_MODELS, data_options,
                          schedule_options)
from .evaluation import evaluate_checkpoint
from .training import train_model

Log = Callable[[str], None]
SWEEP_SIGMAS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
SUMMARY = 'summary.json'
#: the test metrics the summary keeps
METRICS = ('mIoU', 'aAcc', 'mAcc')


@dataclass
class DemoOptions:
    """The options of ``tools/misc/demo.py`` (``sweep=False`` is
    ``--no-sweep``; ``dataset`` is the library's only), checked when
    made."""
    out: str = field(default='work_dirs/demo', metadata=dict(
        help='output folder (default: work_dirs/demo)', metavar='DIR'))
    data_root: str = field(default='data/synthetic-context', metadata=dict(
        help='where the synthetic dataset is written (DIR/'
        'ADEChallengeData2016; default: data/synthetic-context)',
        metavar='DIR'))
    models: Sequence[str] = field(default=DEFAULT_MODELS, metadata=dict(
        help='which demo models to train and test (default: '
        f'{" ".join(DEFAULT_MODELS)})', choices=list(DEMO_MODELS)))
    sweep_models: Optional[Sequence[str]] = field(default=None, metadata=dict(
        help='which of them to sweep over noise (default: all)',
        choices=list(DEMO_MODELS)))
    iters: Optional[int] = field(default=None, metadata=dict(
        help='training iterations (default: the configs\' 800)'))
    sigmas: Sequence[float] = field(default=SWEEP_SIGMAS, metadata=dict(
        help='noise standard deviations of the sweeps (default: '
        f'{" ".join(map(str, SWEEP_SIGMAS))})'))
    draws: int = field(default=2, metadata=dict(
        help='noise draws per sigma in the sweeps (default 2)'))
    sweep: bool = field(default=True, metadata=dict(
        help='skip the robustness sweeps'))
    train_encoder: bool = field(default=False, metadata=dict(
        help='train the encoder too (by default it keeps its random '
        'initialisation, so that the context the task needs must be gathered '
        'by the decoder\'s attention); the encoder then solves the task and '
        'the CBSA heads\' attention goes unused; use another --out'))
    retrain: bool = field(default=False, metadata=dict(
        help='train (and sweep) again even if finished runs exist'))
    dataset: SyntheticADE20KSpec = field(
        default_factory=lambda: SyntheticADE20KSpec(variant='context'))
    #: config options of every run (``--cfg-options``), over the demo's
    cfg_options: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        for flag, names in (('--models', self.models),
                            ('--sweep-models', self.sweep_models or ())):
            unknown = [n for n in names if n not in DEMO_MODELS]
            if unknown:
                raise InputError(
                    f'{flag}: no demo model {", ".join(unknown)}; the demo '
                    f'models are {", ".join(DEMO_MODELS)}')
        if self.iters is not None and self.iters < 1:
            raise InputError(f'--iters must be >= 1, got {self.iters}')
        self.sweep_options(label='', out='')  # its checks, before any work

    def run_options(self, data_root: str) -> Dict[str, Any]:
        """The config options of every run: the data, ``cfg_options``."""
        return {**data_options(data_root), **(self.cfg_options or {})}

    def sweep_dir(self, name: str) -> str:
        """The results folder of demo model ``name``'s sweep."""
        return osp.join(self.out, 'robustness', name)

    def sweep_options(self, **kwargs: Any) -> Any:
        from mmseg_whitebox.robustness import NoiseSweepOptions
        return NoiseSweepOptions(sigmas=tuple(self.sigmas), draws=self.draws,
                                 progress=False, **kwargs)


def final_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint a finished run named in ``last_checkpoint``."""
    marker = osp.join(work_dir, LAST_CHECKPOINT)
    if not osp.isfile(marker):
        return None
    with open(marker) as f:
        path = f.read().strip()
    return path if osp.isfile(path) else None


def run_demo(options: Optional[DemoOptions] = None,
             log: Log = print) -> Dict[str, Any]:
    """Run the demo; returns the summary also written to
    ``<out>/summary.json``: the data, chance mIoU and, per model, its
    config, checkpoint, metrics, decoder size, overlay and sweep."""
    options = options or DemoOptions()
    start = time.time()
    check_writable_folder(options.out, '--out')
    check_writable_folder(options.data_root, '--data-root')
    _check_same_encoder_setting(options)
    with lock_folder(options.out, '--out'):  # one demo writes there at a time
        log('== 1. synthetic ADE20K-layout data '
            f'({options.dataset.variant} variant)')
        data_root = generate_synthetic_ade20k(options.data_root,
                                              options.dataset)
        meta = load_meta(data_root)
        chance = chance_miou(meta['val_pixel_counts'])
        log(f'{data_root}: {options.dataset.num_train} train / '
            f'{options.dataset.num_val} val images, '
            f'{len(meta["classes_present"])} classes, chance mIoU '
            f'{chance:.2f}')
        summary: Dict[str, Any] = dict(
            data_root=data_root, chance_miou=chance,
            frozen_encoder=not options.train_encoder, models={})
        for name in options.models:
            summary['models'][name] = _train_and_test(
                name, options, data_root, log)

        swept = [n for n in (options.sweep_models or options.models)
                 if n in summary['models']]
        if swept and options.sweep:
            log('== 5. robustness to decoder-attention noise')
            for name in swept:
                summary['models'][name]['robustness'] = _sweep(
                    name, summary['models'][name], options, data_root, log)
            summary['robustness_plot'] = _plot_sweeps(swept, options)
        summary['wall_time_s'] = time.time() - start
        write_json(osp.join(options.out, SUMMARY), summary)
        return summary


def _check_same_encoder_setting(options: DemoOptions) -> None:
    """Refuse ``--out``'s finished runs of the other encoder setting."""
    previous = osp.join(options.out, SUMMARY)
    if options.retrain or not osp.isfile(previous):
        return
    with open(previous) as f:
        frozen = json.load(f).get('frozen_encoder', False)
    if frozen == options.train_encoder:
        was = 'frozen' if frozen else 'trained'
        raise InputError(
            f'--out {options.out} holds runs with the encoder {was}; use '
            'another --out (or --retrain to replace them)')


def _train_and_test(name: str, options: DemoOptions, data_root: str,
                    log: Log) -> Dict[str, Any]:
    from mmseg.apis import init_model
    config = DEMO_MODELS[name]
    path = config_path(config)
    data = options.run_options(data_root)
    work_dir = osp.join(options.out, name)
    train_cfg = runner_config(
        path, {**schedule_options(options.iters), **data}, work_dir)
    if not options.train_encoder:
        ensure_custom_hook(train_cfg, 'FreezeBackboneHook')
    log(f'== 2. train {name}: {config}')
    ckpt = final_checkpoint(work_dir)
    max_iters = train_cfg.train_cfg.max_iters
    if ckpt and not options.retrain and \
            ckpt.endswith(f'iter_{max_iters}.pth'):
        log(f'[{name}] reusing finished run {ckpt} (--retrain to redo)')
    else:
        started = time.time()
        train_model(train_cfg, device='cpu')  # a CPU demo, GPU or not
        ckpt = final_checkpoint(work_dir)
        if ckpt is None:
            raise RuntimeError(f'training {name} left no checkpoint in '
                               f'{work_dir}')
        log(f'[{name}] trained in {time.time() - started:.0f}s')
    log(f'== 3. test {name}')
    metrics = evaluate_checkpoint(
        runner_config(path, data, osp.join(work_dir, 'test')), ckpt,
        device='cpu')
    log(f'== 4. inference {name} (mmseg.apis)')
    model = init_model(path, ckpt, device='cpu')
    overlay = _infer_and_draw(model, data_root,
                              osp.join(options.out, f'overlay_{name}.png'))
    return dict(config=config, checkpoint=ckpt,
                **{key: float(metrics[key]) for key in METRICS},
                inference=overlay, **_decoder_complexity(model))


def _decoder_complexity(model: Any) -> Dict[str, float]:
    """Decoder params and GFLOPs (multiply-adds) on the features of a
    512x512 image (as many maps as the encoder outputs)."""
    import torch

    from mmseg_whitebox.analysis import decode_head_complexity
    patch = model.backbone.patch_embed.projection.kernel_size[0]
    with torch.no_grad():  # the encoder's outputs, on a crop-sized image
        outputs = model.extract_feat(torch.zeros(1, 3, 16 * patch,
                                                 16 * patch))
    features = [torch.zeros(1, out.shape[1], 512 // patch, 512 // patch)
                for out in outputs]
    flops, params = decode_head_complexity(model.decode_head, features)
    return dict(decoder_params=params, decoder_gflops_512=flops / 1e9)


def _infer_and_draw(model: Any, data_root: str,
                    out_file: str) -> Dict[str, Any]:
    """Single-image inference through mmseg.apis, drawn as ground truth |
    prediction with a legend."""
    import mmcv
    import numpy as np
    from mmseg.apis import inference_model

    from mmseg_whitebox.visualization.overlay import (config_name,
                                                      dataset_meta,
                                                      overlay_figure)

    name = sample_name('validation', 0)
    img_path = osp.join(data_root, 'images', 'validation', name + '.jpg')
    ann_path = osp.join(data_root, 'annotations', 'validation', name + '.png')
    result = inference_model(model, img_path)
    gt = mmcv.imread(ann_path, flag='unchanged').astype(np.int64) - 1
    gt[gt < 0] = 255  # reduce_zero_label: "other" is ignored
    pred = result.pred_sem_seg.data[0].numpy()
    valid = gt != 255
    overlay_figure(mmcv.imread(img_path, channel_order='rgb'), pred,
                   *dataset_meta(model), model_name=config_name(model),
                   ground_truth=gt, image_name=name, out_file=out_file)
    return dict(image=img_path, overlay=out_file,
                pixel_accuracy=float((pred[valid] == gt[valid]).mean() * 100))


def _sweep(name: str, model: Dict[str, Any], options: DemoOptions,
           data_root: str, log: Log) -> Dict[str, Any]:
    """One model's sweep, resumed unless ``retrain``, summarised."""
    from mmseg_whitebox.robustness import run_noise_sweep
    out = options.sweep_dir(name)
    results = osp.join(out, 'results.json')
    resume = osp.isfile(results)
    if resume and options.retrain:
        os.remove(results)
        resume = False
    sweep = options.sweep_options(label=name, out=out, resume=resume,
                                  work_dir=osp.join(out, 'runs'),
                                  cfg_options=options.run_options(
                                      data_root))
    found = run_noise_sweep(config_path(model['config']), model['checkpoint'],
                            sweep, log=log)
    return dict(
        clean=found['clean']['mIoU'],
        ablated=found['ablation']['decoder-attention']['metrics']['mIoU'],
        usage=[u['ratio_mean'] for u in found['attention_usage']],
        curve={p['sigma']: p['mIoU_mean'] for p in found['points']})


def _plot_sweeps(names: Sequence[str], options: DemoOptions) -> str:
    from mmseg_whitebox.robustness.plotting import plot_folders
    encoder = ('encoder trained' if options.train_encoder else
               'encoder frozen at its random initialisation')
    title = (f'mIoU under decoder-attention noise: {" vs ".join(names)}\n'
             f'({encoder}; synthetic context data)')
    return plot_folders([options.sweep_dir(n) for n in names],
                        osp.join(options.out, 'robustness.png'), title=title)


def removal_verdict(name: str, robustness: Dict[str, Any],
                    sigmas: Sequence[float]) -> str:
    """One model's headline: what removing its decoder attention costs,
    and whether that attention is in use (then its sigma_50 is
    informative), unused, or in use but harmful."""
    from mmseg_whitebox.robustness import attention_unused
    from mmseg_whitebox.robustness.summary import (fmt_sigma50,
                                                   sigma_at_fraction)
    clean, removed = robustness['clean'], robustness['ablated']
    if attention_unused(clean, removed):
        return (f'note: removing {name}\'s decoder attention changes mIoU by '
                f'{removed - clean:+.2f}: it is unused, so its robustness is '
                'not informative')
    curve = [robustness['curve'].get(s, float('nan')) for s in sigmas]
    sigma_50 = fmt_sigma50(sigma_at_fraction(sigmas, curve, clean),
                           min(sigmas), max(sigmas))
    if removed > clean:  # in use, but the head does better without it
        return (f'{name}: removing its decoder attention raises mIoU by '
                f'{removed - clean:.2f} ({clean:.2f} -> {removed:.2f}): it '
                'is in use but lowers mIoU here, so its noise curve is not '
                f'a robustness of something useful: sigma_50 {sigma_50}')
    return (f'{name}: removing its decoder attention costs '
            f'{clean - removed:.2f} mIoU ({clean:.2f} -> {removed:.2f}): it '
            f'is in use, so its robustness is informative: sigma_50 '
            f'{sigma_50}')


def format_demo_results(summary: Dict[str, Any]) -> str:
    """The tables the tool prints: decoder size and metrics, mIoU under
    noise, :func:`removal_verdict` per model, and the files written."""
    lines = ['', '== results on the synthetic validation set '
             f'(chance mIoU {summary["chance_miou"]:.2f})',
             f'{"model":<16}{"decoder params":>16}{"GFLOPs@512":>12}'
             f'{"mIoU":>8}{"aAcc":>8}']
    for name, r in summary['models'].items():
        lines.append(f'{name:<16}{r["decoder_params"]:>16,}'
                     f'{r["decoder_gflops_512"]:>12.3f}{r["mIoU"]:>8.2f}'
                     f'{r["aAcc"]:>8.2f}')
    swept = {n: r['robustness'] for n, r in summary['models'].items()
             if 'robustness' in r}
    if swept:
        sigmas = sorted({s for r in swept.values() for s in r['curve']})
        lines += ['', 'mIoU under decoder-attention noise (absolute sigma), '
                  'mean over draws',
                  f'{"model":<16}{"clean":>7}{"removed":>9}' +
                  ''.join(f'{s:>8g}' for s in sigmas) + '   usage per layer']
        for name, r in swept.items():
            usage = ' '.join(f'{u:.3f}' for u in r['usage'])
            lines.append(
                f'{name:<16}{r["clean"]:>7.2f}{r["ablated"]:>9.2f}' +
                ''.join(f'{r["curve"].get(s, float("nan")):>8.2f}'
                        for s in sigmas) + f'   {usage}')
        lines += ['', 'what removing each decoder attention costs:']
        lines += [removal_verdict(name, r, sigmas)
                  for name, r in swept.items()]
        lines.append(f'plot: {summary["robustness_plot"]}')
    for name, r in summary['models'].items():
        lines.append(f'overlay ({name}): {r["inference"]["overlay"]}')
    return '\n'.join(lines)
