"""The interpretability report of a trained white-box decoder
(``tools/analysis_tools/coding_rate.py``): per decoder layer, the
compression term of the tokens entering and leaving it (the CBSA paper's
Fig. 5) and, for CBSA heads, the extraction attention (Fig. 7 style).
"""
from __future__ import annotations

import os
import os.path as osp
from typing import Any, Dict, List, Optional

from mmseg_whitebox.engine.config_checks import check_data_roots
from mmseg_whitebox.utils.atomic import save_figure, write_csv, write_json
from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint
from mmseg_whitebox.utils.device import auto_device
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import InputError
from .coding_rate import CompressionProbe


def coding_rate_report(cfg: Any, checkpoint: str, out: str,
                       num_images: int = 50, eps: float = 0.1,
                       maps: int = 2, device: Optional[str] = None,
                       title: str = '') -> Dict[str, Any]:
    """Measure the model of ``cfg`` with ``checkpoint`` on its first
    ``num_images`` test images into ``out/coding_rate.{json,csv,png}``;
    for a CBSA head, also the extraction maps of the first ``maps`` test
    images. Returns ``rows`` (one per layer), ``images`` (how many were
    measured) and ``files`` (written)."""
    import torch
    from mmengine.runner import Runner
    from mmseg.apis import init_model

    check_checkpoint(checkpoint)
    check_data_roots(cfg, ('test_dataloader', ))
    with lock_folder(out, '--out'):
        model = init_model(cfg, checkpoint, device=auto_device(device))
        probe = CompressionProbe(model, eps)
        cfg.test_dataloader.batch_size = 1
        loader = Runner.build_dataloader(cfg.test_dataloader)
        seen = 0
        with probe, torch.no_grad():
            for batch in loader:
                model.test_step(batch)
                seen += len(batch['inputs'])
                if seen >= num_images:
                    break
        rows = probe.summary()
        json_file = osp.join(out, 'coding_rate.json')
        write_json(json_file, dict(config=cfg.filename, checkpoint=checkpoint,
                                   eps=eps, images=seen, layers=rows))
        write_csv(osp.join(out, 'coding_rate.csv'), list(rows[0]), rows)
        png = plot_coding_rates(
            rows, osp.join(out, 'coding_rate.png'),
            f'{title}: coding rate per decoder layer ({seen} images)')
        files = [json_file, png]
        if maps > 0:
            files += draw_test_image_maps(model, cfg, out, maps)
        return dict(rows=rows, images=seen, files=files)


def plot_coding_rates(rows: List[Dict], out_file: str, title: str) -> str:
    """``R_c`` and its unit-norm variant per layer, entering and leaving
    it."""
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


def draw_test_image_maps(model: Any, cfg: Any, out: str,
                         count: int) -> List[str]:
    """The extraction maps of every CBSA layer on the first ``count`` test
    images (none, with a note, for a model without CBSA layers)."""
    import mmcv
    from mmseg.apis import inference_model

    from .attention_maps import CBSAAttentionCapture, draw_extraction_maps
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
