"""Interpretability measurements of a trained white-box decoder.

    python tools/analysis_tools/coding_rate.py CONFIG CHECKPOINT \
        [--num-images 50] [--eps 0.1] [--maps 2] [--out DIR] \
        [--cfg-options k=v ...]

1. Per layer, the compression term R_c (CRATE eq. 8 / CBSA eq. 2, with the
   layer's own subspaces) and its normalised variant (unit-length tokens)
   of the residual stream entering and leaving the layer, averaged over
   --num-images test images (the CBSA paper's Fig. 5 measurement):
   OUT/coding_rate.{json,csv,png}.
2. For CBSA heads, the extraction attention maps (which pixels each
   representative gathers) of every layer overlaid on the first --maps test
   images (CBSA paper Fig. 7 style): OUT/extraction_<image>_layer<i>.png.
"""
import argparse
import os
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.apis.model_index import read_config
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.utils.atomic import save_figure, write_csv, write_json
from mmseg_whitebox.utils.input_checks import (check_checkpoint,
                                               check_data_roots)
from mmseg_whitebox.utils.tool_error import InputError


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--num-images', type=int, default=50,
                   help='test images to measure on (default 50)')
    p.add_argument('--eps', type=float, default=0.1,
                   help='quantisation precision epsilon (default 0.1, i.e. '
                   'eps^2 = 0.01 as the CBSA code)')
    p.add_argument('--maps', type=int, default=2,
                   help='images to draw CBSA extraction maps for (0: none)')
    p.add_argument('--out', help='output folder (default: work_dirs/'
                   'coding_rate/<config name>)')
    p.add_argument('--device', default='cpu')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def plot_rates(rows, out_file: str, title: str) -> str:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    layers = [r['layer'] for r in rows]
    for ax, key, label in ((axes[0], 'rate', 'R_c'),
                           (axes[1], 'normalized', 'R_c, unit-norm tokens')):
        ax.plot(layers, [r[f'{key}_in_mean'] for r in rows], 'o--',
                label='entering the layer')
        ax.plot(layers, [r[f'{key}_out_mean'] for r in rows], 'o-',
                label='leaving the layer')
        ax.set_xlabel('decoder layer')
        ax.set_ylabel(label)
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_file, dpi=110)
    plt.close(fig)
    return out_file


def draw_maps(model, cfg, out: str, count: int) -> list:
    import mmcv
    from mmseg.apis import inference_model

    from mmseg_whitebox.analysis.attention_maps import (
        CBSAAttentionCapture, draw_extraction_maps)
    try:
        capture = CBSAAttentionCapture(model)
    except InputError:
        print('no CBSA layers: skipping extraction maps')
        return []
    dataset_cfg = cfg.test_dataloader.dataset
    img_dir = osp.join(dataset_cfg.data_root,
                       dataset_cfg.data_prefix['img_path'])
    names = sorted(os.listdir(img_dir))[:count]
    patch = model.backbone.patch_embed.projection.kernel_size[0]
    files = []
    for name in names:
        path = osp.join(img_dir, name)
        with capture:
            result = inference_model(model, path)
        image = mmcv.imread(path, channel_order='rgb')
        h, w = result.img_shape
        for i, (op_name, records) in enumerate(capture.records.items()):
            record = records[-1]
            op = capture.ops[op_name]
            valid = (-(-h // patch), -(-w // patch))
            out_file = osp.join(
                out, f'extraction_{osp.splitext(name)[0]}_layer{i}.png')
            draw_extraction_maps(
                image, record['attn'][0], record['hw'], op.rep_grid,
                out_file, record['grid_start'], valid,
                title=f'{op_name}: extraction attention of representatives '
                '(cyan: pooled initialisation cell)')
            files.append(out_file)
        for records in capture.records.values():
            records.clear()
    return files


def main(argv=None) -> list:
    args = parse_args(argv)
    check_checkpoint(args.checkpoint)
    cfg = read_config(args.config, args.cfg_options)
    import torch
    from mmengine.runner import Runner
    from mmseg.apis import init_model

    from mmseg_whitebox.analysis.coding_rate import CompressionProbe
    check_data_roots(cfg, ('test_dataloader', ))
    name = osp.splitext(osp.basename(args.config))[0]
    out = args.out or osp.join('work_dirs', 'coding_rate', name)
    os.makedirs(out, exist_ok=True)
    model = init_model(cfg, args.checkpoint, device=args.device)
    probe = CompressionProbe(model, args.eps)
    cfg.test_dataloader.batch_size = 1
    loader = Runner.build_dataloader(cfg.test_dataloader)
    seen = 0
    with probe, torch.no_grad():
        for batch in loader:
            model.test_step(batch)
            seen += len(batch['inputs'])
            if seen >= args.num_images:
                break
    rows = probe.summary()
    write_json(osp.join(out, 'coding_rate.json'), dict(
        config=args.config, checkpoint=args.checkpoint, eps=args.eps,
        images=seen, layers=rows))
    write_csv(osp.join(out, 'coding_rate.csv'), list(rows[0]), rows)
    png = plot_rates(rows, osp.join(out, 'coding_rate.png'),
                     f'{name}: coding rate per decoder layer ({seen} images)')
    print(f'compression term R_c per decoder layer ({seen} images, eps '
          f'{args.eps}); in -> out of each layer, own subspaces')
    print(f'{"layer":<34}{"R_c in":>10}{"R_c out":>10}{"norm in":>10}'
          f'{"norm out":>10}')
    for r in rows:
        print(f'[{r["layer"]}] {r["site"]:<30}{r["rate_in_mean"]:>10.2f}'
              f'{r["rate_out_mean"]:>10.2f}{r["normalized_in_mean"]:>10.2f}'
              f'{r["normalized_out_mean"]:>10.2f}')
    files = [osp.join(out, 'coding_rate.json'), png]
    if args.maps > 0:
        files += draw_maps(model, cfg, out, args.maps)
    print('wrote ' + ', '.join(files))
    return files


if __name__ == '__main__':
    run_tool(main)
