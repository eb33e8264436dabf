"""The embedded demo behind ``make demo``, on CPU.

1. writes the synthetic ADE20K-layout dataset, context variant (a shape's
   class depends on a landmark elsewhere in the image), to
   ``data/synthetic-context``;
2. trains the Segmenter baseline, the CBSA (CBT) head and the rigorous
   CBSA (CBT-dagger) head (``--models``: also MSSA (SA/CA) and TSSA) on the
   same demo encoder (``--models cbt``: the CBSA head on a white-box CBT
   encoder) with ``tools/train.py`` (as a user would; a finished
   run in the output folder is reused unless ``--retrain``);
3. tests each with ``tools/test.py``: mIoU next to chance level, decoder
   parameters and decoder GFLOPs at 512x512 (mmengine's analysis);
4. runs single-image inference through ``mmseg.apis`` (``init_model``,
   ``inference_model``) and saves an overlay PNG (ground truth |
   prediction, painted by mmseg's ``SegLocalVisualizer``) titled with the
   model and its sigma, with a legend of the classes present;
5. sweeps each model over decoder-attention noise with
   ``tools/noise_robustness.py`` (clean, attention-removed and noisy
   mIoU, attention usage) and overlays them in one plot.

With ``--freeze-encoder`` the encoder keeps its random initialisation,
so whatever context the task needs has to be gathered by the decoder's
attention: a setting in which a robustness claim about that attention is
informative.

Everything lands in ``work_dirs/demo`` (``summary.json`` holds the figures).
"""
import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time
from typing import Dict, List, Optional

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.apis.demo_models import (DEFAULT_MODELS, DEMO_MODELS,
                                             data_options, freeze_options,
                                             schedule_options)
from mmseg_whitebox.cli import run_tool
from mmseg_whitebox.datasets.synthetic_ade20k import (
    SyntheticADE20KSpec,
    chance_miou,
    generate_synthetic_ade20k,
    load_meta,
    sample_name)
from mmseg_whitebox.robustness import attention_unused
from mmseg_whitebox.utils.atomic import write_json

# the repository root: configs are named relative to it, tools run in it
ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SWEEP_SIGMAS = ('0.001', '0.003', '0.01', '0.03', '0.1', '0.3', '1.0')


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='work_dirs/demo',
                   help='output folder (default: work_dirs/demo)')
    p.add_argument('--data', default='data/synthetic-context',
                   help='where the synthetic dataset is written')
    p.add_argument('--models', nargs='+', choices=list(DEMO_MODELS),
                   default=list(DEFAULT_MODELS),
                   help='which demo models to train and test (default: '
                   f'{" ".join(DEFAULT_MODELS)})')
    p.add_argument('--sweep-models', nargs='+', choices=list(DEMO_MODELS),
                   help='which of them to sweep over noise (default: all)')
    p.add_argument('--iters', type=int, default=None,
                   help='training iterations (default: the configs\' 800)')
    p.add_argument('--seeds', type=int, default=2,
                   help='noise draws per sigma in the sweeps (default 2)')
    p.add_argument('--no-sweep', action='store_true',
                   help='skip the robustness sweeps')
    p.add_argument('--freeze-encoder', action='store_true',
                   help='keep the (randomly initialised) encoder fixed, so '
                   'that any use of context must come from the decoder\'s '
                   'attention; use another --out')
    p.add_argument('--retrain', action='store_true',
                   help='train (and sweep) again even if finished runs exist')
    return p.parse_args(argv)


def run_script(args: List[str]) -> None:
    """Run a script of this repository as a user would; if it fails (it
    has printed why), the demo stops with the same exit status."""
    cmd = [sys.executable] + args
    print('$', ' '.join(cmd), flush=True)
    status = subprocess.run(cmd, cwd=ROOT).returncode
    if status != 0:
        print(f'{osp.basename(sys.argv[0])}: {args[0]} failed (exit status '
              f'{status}); the demo stops here', file=sys.stderr)
        raise SystemExit(status)


def final_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint a finished run recorded in ``last_checkpoint``."""
    marker = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(marker):
        return None
    with open(marker) as f:
        path = f.read().strip()
    return path if osp.isfile(path) else None


def train(name: str, config: str, work_dir: str, opts: List[str],
          max_iters: int, retrain: bool) -> str:
    ckpt = final_checkpoint(work_dir)
    if ckpt and not retrain and ckpt.endswith(f'iter_{max_iters}.pth'):
        print(f'[{name}] reusing finished run {ckpt} (--retrain to redo)')
        return ckpt
    start = time.time()
    run_script(['tools/train.py', config, '--work-dir', work_dir,
                '--cfg-options'] + opts)
    print(f'[{name}] trained in {time.time() - start:.0f}s')
    ckpt = final_checkpoint(work_dir)
    if ckpt is None:
        raise RuntimeError(f'training {name} left no checkpoint in '
                           f'{work_dir}')
    return ckpt


def test(config: str, ckpt: str, work_dir: str, opts: List[str]) -> Dict:
    test_dir = osp.join(work_dir, 'test')
    before = set(glob.glob(osp.join(test_dir, '*', '*.json')))
    run_script(['tools/test.py', config, ckpt, '--work-dir', test_dir,
                '--cfg-options'] + opts)
    new = sorted(set(glob.glob(osp.join(test_dir, '*', '*.json'))) - before)
    if not new:
        raise RuntimeError(f'tools/test.py wrote no metrics under {test_dir}')
    with open(new[-1]) as f:
        return json.load(f)


def decoder_complexity(model) -> Dict[str, float]:
    """Decoder params and GFLOPs (mmengine, multiply-adds) on the features
    of a 512x512 image."""
    import torch

    from mmseg_whitebox.analysis import decode_head_complexity
    patch = model.backbone.patch_embed.projection.kernel_size[0]
    width = model.decode_head.in_channels
    feature = torch.zeros(1, width, 512 // patch, 512 // patch)
    flops, params = decode_head_complexity(model.decode_head, feature)
    return dict(decoder_params=params, decoder_gflops_512=flops / 1e9)


def infer_and_draw(model, data_root: str, out_file: str) -> Dict:
    """Single-image inference through mmseg.apis; the overlay (ground
    truth | prediction, painted by mmseg's visualizer) names the model and
    its sigma and has a legend of the classes present."""
    import mmcv
    import numpy as np
    from mmseg.apis import inference_model

    from mmseg_whitebox.apis.image_demo import dataset_meta
    from mmseg_whitebox.apis.overlay import config_name, overlay_figure

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


def sweep(name: str, config: str, ckpt: str, out_dir: str,
          opts: List[str], seeds: int, redo: bool) -> Dict:
    results = osp.join(out_dir, 'results.json')
    cmd = ['tools/noise_robustness.py', config, ckpt, '--sigmas',
           *SWEEP_SIGMAS, '--seeds', str(seeds), '--name', name, '--out',
           out_dir, '--work-dir', osp.join(out_dir, 'runs'), '--cfg-options',
           *opts]
    if osp.isfile(results):
        if redo:
            os.remove(results)
        else:
            cmd.insert(3, '--resume')
    run_script(cmd)
    with open(results) as f:
        return json.load(f)


def main(argv=None) -> Dict:
    args = parse_args(argv)
    out = osp.join(ROOT, args.out) if not osp.isabs(args.out) else args.out
    os.makedirs(out, exist_ok=True)
    t0 = time.time()

    print('== 1. synthetic ADE20K-layout data (context variant)')
    spec = SyntheticADE20KSpec(variant='context')
    data_root = generate_synthetic_ade20k(osp.join(ROOT, args.data), spec)
    meta = load_meta(data_root)
    chance = chance_miou(meta['val_pixel_counts'])
    print(f'{data_root}: {spec.num_train} train / {spec.num_val} val images, '
          f'{len(meta["classes_present"])} classes, chance mIoU '
          f'{chance:.2f}')

    from mmengine.config import Config
    from mmseg.apis import init_model
    summary = dict(data_root=data_root, chance_miou=chance,
                   frozen_encoder=args.freeze_encoder, models={})
    opts = data_options(data_root)
    for name in args.models:
        config = DEMO_MODELS[name]
        work_dir = osp.join(out, name)
        max_iters = args.iters or Config.fromfile(
            osp.join(ROOT, config)).train_cfg.max_iters
        print(f'== 2. train {name}: {config}')
        ckpt = train(name, config, work_dir,
                     opts + schedule_options(args.iters) +
                     freeze_options(args.freeze_encoder), max_iters,
                     args.retrain)
        print(f'== 3. test {name}')
        metrics = test(config, ckpt, work_dir, opts)
        print(f'== 4. inference {name} (mmseg.apis)')
        model = init_model(osp.join(ROOT, config), ckpt, device='cpu')
        overlay = infer_and_draw(model, data_root,
                                 osp.join(out, f'overlay_{name}.png'))
        summary['models'][name] = dict(
            config=config, checkpoint=ckpt, mIoU=metrics['mIoU'],
            aAcc=metrics['aAcc'], mAcc=metrics['mAcc'], inference=overlay,
            **decoder_complexity(model))

    sweeps = [n for n in (args.sweep_models or args.models)
              if n in summary['models']]
    if sweeps and not args.no_sweep:
        print('== 5. robustness to decoder-attention noise')
        for name in sweeps:
            r = summary['models'][name]
            data = sweep(name, r['config'], r['checkpoint'],
                         osp.join(out, 'robustness', name), opts, args.seeds,
                         args.retrain)
            r['robustness'] = dict(
                clean=data['clean']['mIoU'],
                ablated=data['ablation']['decoder-attention']['metrics'][
                    'mIoU'],
                usage=[u['ratio_mean'] for u in data['attention_usage']],
                curve={p['sigma']: p['mIoU_mean'] for p in data['points']})
        run_script(['tools/analysis_tools/plot_robustness.py'] +
                   [osp.join(out, 'robustness', n) for n in sweeps] +
                   ['--out', osp.join(out, 'robustness.png'), '--title',
                    'Decoder-attention noise, synthetic context data' +
                    (', frozen encoder' if args.freeze_encoder else '')])
        summary['robustness_plot'] = osp.join(out, 'robustness.png')

    print_results(summary, chance)
    summary['wall_time_s'] = time.time() - t0
    write_json(osp.join(out, 'summary.json'), summary)
    print(f'summary: {osp.join(out, "summary.json")} '
          f'({summary["wall_time_s"]:.0f}s)')
    return summary


def print_results(summary: Dict, chance: float) -> None:
    print('\n== results on the synthetic validation set '
          f'(chance mIoU {chance:.2f})')
    print(f'{"model":<16}{"decoder params":>16}{"GFLOPs@512":>12}'
          f'{"mIoU":>8}{"aAcc":>8}')
    for name, r in summary['models'].items():
        print(f'{name:<16}{r["decoder_params"]:>16,}'
              f'{r["decoder_gflops_512"]:>12.3f}{r["mIoU"]:>8.2f}'
              f'{r["aAcc"]:>8.2f}')
    rob = {n: r['robustness'] for n, r in summary['models'].items()
           if 'robustness' in r}
    if rob:
        sigmas = sorted({s for r in rob.values() for s in r['curve']})
        print('\nmIoU under decoder-attention noise (absolute sigma), mean '
              'over draws')
        print(f'{"model":<16}{"clean":>7}{"removed":>9}' +
              ''.join(f'{s:>8g}' for s in sigmas) + '   usage per layer')
        for name, r in rob.items():
            usage = ' '.join(f'{u:.3f}' for u in r['usage'])
            print(f'{name:<16}{r["clean"]:>7.2f}{r["ablated"]:>9.2f}' +
                  ''.join(f'{r["curve"].get(s, float("nan")):>8.2f}'
                          for s in sigmas) + f'   {usage}')
        for name, r in rob.items():
            if attention_unused(r['clean'], r['ablated']):
                print(f'note: removing {name}\'s decoder attention changes '
                      f'mIoU by {r["ablated"] - r["clean"]:+.2f}: it is '
                      'unused, so its robustness is not informative')
        print(f'plot: {summary["robustness_plot"]}')
    for name, r in summary['models'].items():
        print(f'overlay ({name}): {r["inference"]["overlay"]}')


if __name__ == '__main__':
    run_tool(main)
