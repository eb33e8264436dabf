"""The embedded demo behind ``make demo``, on CPU in minutes.

1. writes the synthetic ADE20K-layout dataset into ``data/synthetic``;
2. trains each demo model with ``tools/train.py`` (exactly as a user would;
   a finished run in the output folder is reused unless ``--retrain``);
3. tests it with ``tools/test.py`` and prints mIoU next to chance level
   and the decoder's parameter count;
4. runs single-image inference through ``mmseg.apis`` (``init_model``,
   ``inference_model``) and saves an overlay PNG (ground truth | prediction)
   drawn by mmseg's ``SegLocalVisualizer``.

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

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

import mmseg_whitebox  # noqa: E402,F401
from mmseg_whitebox.datasets.synthetic_ade20k import (  # noqa: E402
    SyntheticADE20KSpec, chance_miou, generate_synthetic_ade20k, load_meta,
    sample_name)

# name -> config (relative to the repository root)
DEMO_MODELS: Dict[str, str] = {
    'segmenter': 'configs/segmenter/'
    'segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py',
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='work_dirs/demo',
                   help='output folder (default: work_dirs/demo)')
    p.add_argument('--data', default='data/synthetic',
                   help='where the synthetic dataset is written')
    p.add_argument('--models', nargs='+', choices=list(DEMO_MODELS),
                   default=list(DEMO_MODELS), help='which demo models')
    p.add_argument('--iters', type=int, default=None,
                   help='training iterations (default: the configs\' 800)')
    p.add_argument('--retrain', action='store_true',
                   help='train again even if a finished run exists')
    return p.parse_args(argv)


def run_tool(args: List[str]) -> None:
    cmd = [sys.executable] + args
    print('$', ' '.join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def schedule_options(iters: Optional[int], data_root: str) -> List[str]:
    opts = [f'train_dataloader.dataset.data_root={data_root}',
            f'val_dataloader.dataset.data_root={data_root}',
            f'test_dataloader.dataset.data_root={data_root}']
    if iters is not None:
        warmup = max(1, min(50, iters // 4))
        opts += [f'train_cfg.max_iters={iters}',
                 f'train_cfg.val_interval={iters}',
                 f'param_scheduler.0.end={warmup}',
                 f'param_scheduler.1.begin={warmup}',
                 f'param_scheduler.1.end={iters}',
                 f'default_hooks.checkpoint.interval={iters}']
    return opts


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
    run_tool(['tools/train.py', config, '--work-dir', work_dir,
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
    run_tool(['tools/test.py', config, ckpt, '--work-dir', test_dir,
              '--cfg-options'] + opts)
    new = sorted(set(glob.glob(osp.join(test_dir, '*', '*.json'))) - before)
    if not new:
        raise RuntimeError(f'tools/test.py wrote no metrics under {test_dir}')
    with open(new[-1]) as f:
        return json.load(f)


def decoder_params(config: str, ckpt: str) -> int:
    from mmseg.apis import init_model
    model = init_model(osp.join(ROOT, config), ckpt, device='cpu')
    return sum(p.numel() for p in model.decode_head.parameters())


def infer_and_draw(config: str, ckpt: str, data_root: str,
                   out_file: str) -> Dict:
    """Single-image inference through mmseg.apis, overlay by mmseg's
    visualizer (left: ground truth, right: prediction)."""
    import mmcv
    import numpy as np
    import torch
    from mmengine.structures import PixelData
    from mmseg.apis import inference_model, init_model
    from mmseg.visualization import SegLocalVisualizer

    model = init_model(osp.join(ROOT, config), ckpt, device='cpu')
    name = sample_name('validation', 0)
    img_path = osp.join(data_root, 'images', 'validation', name + '.jpg')
    ann_path = osp.join(data_root, 'annotations', 'validation', name + '.png')
    result = inference_model(model, img_path)
    gt = mmcv.imread(ann_path, flag='unchanged').astype(np.int64) - 1
    gt[gt < 0] = 255  # reduce_zero_label: "other" is ignored
    result.gt_sem_seg = PixelData(data=torch.from_numpy(gt[None]))
    pred = result.pred_sem_seg.data[0].numpy()
    valid = gt != 255
    visualizer = SegLocalVisualizer(name=f'demo-{time.time()}', alpha=0.6)
    # (not via __init__: mmseg 1.2.2 swaps classes and palette there)
    visualizer.set_dataset_meta(model.dataset_meta['classes'],
                                model.dataset_meta['palette'])
    image = mmcv.imread(img_path, channel_order='rgb')
    visualizer.add_datasample(
        name, image, result, draw_gt=True, draw_pred=True,
        out_file=out_file, with_labels=False)
    return dict(image=img_path, overlay=out_file,
                pixel_accuracy=float((pred[valid] == gt[valid]).mean() * 100))


def main(argv=None) -> Dict:
    args = parse_args(argv)
    out = osp.join(ROOT, args.out) if not osp.isabs(args.out) else args.out
    os.makedirs(out, exist_ok=True)
    t0 = time.time()

    print('== 1. synthetic ADE20K-layout data')
    spec = SyntheticADE20KSpec()
    data_root = generate_synthetic_ade20k(osp.join(ROOT, args.data), spec)
    meta = load_meta(data_root)
    chance = chance_miou(meta['val_pixel_counts'])
    print(f'{data_root}: {spec.num_train} train / {spec.num_val} val images, '
          f'{len(meta["classes_present"])} classes, chance mIoU '
          f'{chance:.2f}')

    summary = dict(data_root=data_root, chance_miou=chance, models={})
    opts = schedule_options(args.iters, data_root)
    for name in args.models:
        config = DEMO_MODELS[name]
        work_dir = osp.join(out, name)
        from mmengine.config import Config
        max_iters = args.iters or Config.fromfile(
            osp.join(ROOT, config)).train_cfg.max_iters
        print(f'== 2. train {name}: {config}')
        ckpt = train(name, config, work_dir, opts, max_iters, args.retrain)
        print(f'== 3. test {name}')
        metrics = test(config, ckpt, work_dir, opts)
        print(f'== 4. inference {name} (mmseg.apis)')
        overlay = infer_and_draw(config, ckpt, data_root,
                                 osp.join(out, f'overlay_{name}.png'))
        summary['models'][name] = dict(
            config=config, checkpoint=ckpt, mIoU=metrics['mIoU'],
            aAcc=metrics['aAcc'], mAcc=metrics['mAcc'],
            decoder_params=decoder_params(config, ckpt), inference=overlay)

    print('\n== results on the synthetic validation set '
          f'(chance mIoU {chance:.2f})')
    print(f'{"model":<22}{"decoder params":>16}{"mIoU":>8}{"aAcc":>8}')
    for name, r in summary['models'].items():
        print(f'{name:<22}{r["decoder_params"]:>16,}{r["mIoU"]:>8.2f}'
              f'{r["aAcc"]:>8.2f}')
    for name, r in summary['models'].items():
        print(f'overlay ({name}): {r["inference"]["overlay"]}')
    summary['wall_time_s'] = time.time() - t0
    with open(osp.join(out, 'summary.json'), 'w') as f:
        json.dump(summary, f, indent=1)
    print(f'summary: {osp.join(out, "summary.json")} '
          f'({summary["wall_time_s"]:.0f}s)')
    return summary


if __name__ == '__main__':
    main()
