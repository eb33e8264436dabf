"""Deployment through mmseg's APIs and the project's tools: every config
infers at any image size, the image demo paints overlays, get_flops
counts the whole model, and MMSegInferencer finds the configs by name."""
import glob
import os.path as osp
import types

import numpy as np
import pytest
import torch
from mmengine.config import Config

from _helpers import REPO, run_tool

CONFIGS = sorted(
    osp.relpath(p, REPO)
    for p in glob.glob(osp.join(REPO, 'configs', '*', '*.py'))
    if osp.basename(osp.dirname(p)) != '_base_')
DEMO_CBSA = 'configs/cbsa/cbsa_vit-demo_1xb8-800iter_synthade-128x128.py'
IMAGE_HW = (96, 160)
#: mmseg's own ViT-B/L encoders run 2 of their identical layers here (the
#: width, heads and decode head stay as configured), except in this config,
#: which runs a whole ViT-L: the file then stays within about 2 minutes
FULL_DEPTH = {'configs/cbsa/cbsa_vit-l_8xb1-160k_ade20k-640x640.py'}


def _rep_grids(node):
    """Every CBSA ``rep_grid`` in a model config."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'rep_grid':
                yield (value, value) if isinstance(value, int) else value
            else:
                yield from _rep_grids(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _rep_grids(value)


def small_inference_config(path: str) -> Config:
    """The config with random initialisation (nothing downloaded), whole-
    image inference, and a test pipeline that resizes the small image only
    as far as CBSA needs (its representatives grid must fit in the token
    grid): the token grid stays non-square and small."""
    cfg = Config.fromfile(osp.join(REPO, path))
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None
    cfg.model.test_cfg = dict(mode='whole')
    backbone = cfg.model.backbone
    if (backbone.type == 'VisionTransformer' and path not in FULL_DEPTH
            and backbone.embed_dims >= 768):
        backbone.update(num_layers=2, out_indices=-1)
    patch = cfg.model.backbone.get('patch_size', 16)
    short = max([min(IMAGE_HW)] +
                [max(g) * patch for g in _rep_grids(cfg.model.to_dict())])
    long = -(-short * max(IMAGE_HW) // min(IMAGE_HW))
    for step in cfg.test_pipeline:
        if step['type'] == 'Resize':
            step['scale'] = (long, short)
    # and no upsampling to the sliding window's short side
    cfg.model.data_preprocessor.pop('test_short_side', None)
    return cfg


def random_image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(
        0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize('config', CONFIGS)
def test_every_config_infers_a_non_square_image(config):
    from mmseg.apis import inference_model, init_model
    model = init_model(small_inference_config(config), None, device='cpu')
    result = inference_model(model, random_image(*IMAGE_HW))
    pred = result.pred_sem_seg.data
    assert tuple(pred.shape) == (1, ) + IMAGE_HW, config
    logits = result.seg_logits.data
    assert logits.shape[1:] == IMAGE_HW and torch.isfinite(logits).all()
    assert logits.shape[0] == model.decode_head.num_classes


@pytest.fixture(scope='module')
def demo_checkpoint(tmp_path_factory) -> str:
    """A checkpoint of the randomly initialised CBSA demo model, with the
    dataset meta a training run stores, loadable weights-only."""
    from mmseg.apis import init_model
    from mmseg.utils import get_classes, get_palette
    torch.manual_seed(0)
    model = init_model(small_inference_config(DEMO_CBSA), None,
                       device='cpu')
    model.init_weights()
    path = str(tmp_path_factory.mktemp('demo_ckpt') / 'random.pth')
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(dataset_meta=dict(
                        classes=list(get_classes('ade20k')),
                        palette=get_palette('ade20k')))), path)
    torch.load(path, weights_only=True)
    return path


@pytest.fixture(scope='module')
def image_folder(tmp_path_factory) -> str:
    """Two images of different, non-square sizes."""
    import mmcv
    folder = tmp_path_factory.mktemp('images')
    mmcv.imwrite(random_image(96, 160, seed=1), str(folder / 'wide.jpg'))
    mmcv.imwrite(random_image(120, 72, seed=2), str(folder / 'tall.png'))
    (folder / 'notes.txt').write_text('not an image')
    return str(folder)


def test_image_demo_paints_a_folder(demo_checkpoint, image_folder, tmp_path):
    import mmcv
    out = tmp_path / 'overlays'
    proc = run_tool(['tools/image_demo.py', image_folder, DEMO_CBSA,
                     demo_checkpoint, '--out', str(out), '--device',
                     'cpu', '--opacity', '0.6'])
    assert 'wrote 2 overlay(s)' in proc.stdout
    for name, shape in (('wide', (96, 160)), ('tall', (120, 72))):
        overlay = mmcv.imread(str(out / f'{name}.png'))
        assert overlay.shape[:2] == shape
        source = mmcv.imread(osp.join(
            image_folder, 'wide.jpg' if name == 'wide' else 'tall.png'))
        assert np.abs(overlay.astype(int) - source).mean() > 1  # painted


def test_image_demo_single_image_and_bad_input(demo_checkpoint,
                                               image_folder, tmp_path):
    from mmseg_whitebox.apis.image_demo import image_demo
    from mmseg_whitebox.utils.tool_error import ToolError
    image = osp.join(image_folder, 'wide.jpg')
    out_file = str(tmp_path / 'sub' / 'wide_overlay.png')
    images, written = image_demo(image, DEMO_CBSA, demo_checkpoint,
                                 out_file=out_file, device='cpu',
                                 opacity=1.0, title='wide', progress=False)
    assert images == [image] and written == [out_file]
    assert osp.isfile(out_file)

    other = str(tmp_path / 'other.pth')  # a checkpoint of another model
    torch.save(dict(state_dict={'decode_head.x': torch.zeros(1)}), other)
    empty = tmp_path / 'empty'
    empty.mkdir()
    a_file = tmp_path / 'a_file'
    a_file.write_text('')
    bad = [
        (dict(source=str(tmp_path / 'nope.jpg'), out_dir=str(tmp_path)),
         'does not exist'),
        (dict(source=str(empty), out_dir=str(tmp_path)), 'has no images'),
        (dict(source=image_folder, out_dir=str(a_file / 'x')), 'is a file'),
        (dict(source=image_folder, out_file=out_file), '--out DIR'),
        (dict(source=image, checkpoint=str(tmp_path / 'nope.pth'),
              out_dir=str(tmp_path)), 'nope.pth'),
        (dict(source=image, out_dir=str(tmp_path), opacity=0), 'opacity'),
        (dict(source=image, out_dir=str(tmp_path), checkpoint=other),
         'decode_head'),
    ]
    for kwargs, words in bad:
        kwargs = dict(dict(config=DEMO_CBSA, checkpoint=demo_checkpoint),
                      **kwargs)
        with pytest.raises(ToolError, match=words):
            image_demo(**kwargs)
    # without class names in the checkpoint every label still gets a colour
    from mmseg_whitebox.visualization.overlay import dataset_meta
    for num_classes, first in ((150, 'wall'), (1000, 'class 0')):
        model = types.SimpleNamespace(
            decode_head=types.SimpleNamespace(num_classes=num_classes))
        classes, palette = dataset_meta(model)
        assert len(classes) == len(palette) == num_classes
        assert classes[0] == first

    # the tool reports it as one line and status 2, no traceback
    proc = run_tool(['tools/image_demo.py', image_folder, DEMO_CBSA,
                     str(tmp_path / 'nope.pth'), '--out',
                     str(tmp_path)], check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert 'image_demo.py: error: ' in proc.stderr
    assert 'nope.pth' in proc.stderr and 'Traceback' not in proc.stderr


def test_get_flops_counts_the_whole_model(tmp_path):
    import json
    proc = run_tool(['tools/analysis_tools/get_flops.py', DEMO_CBSA,
                     '--shape', '96', '160', '--json',
                     str(tmp_path / 'flops.json')])
    for words in ('Input shape: (1, 3, 96, 160)', 'Flops: ', 'Params: ',
                  'Decode head: ', 'backbone.layers', 'decode_head.layers'):
        assert words in proc.stdout, (words, proc.stdout[-3000:])
    with open(tmp_path / 'flops.json') as f:
        totals = json.load(f)
    assert totals['flops'] == (totals['encoder_flops'] +
                               totals['decode_head_flops'])
    assert 0 < totals['decode_head_params'] < totals['params']

    # the decoder figure is the one the decoder benchmark reports, and
    # attention products are counted (mmengine alone would skip them)
    from mmengine.analysis import FlopAnalyzer

    from mmseg_whitebox.analysis import decode_head_complexity
    from mmseg_whitebox.analysis.complexity import (build_segmentor,
                                                    model_complexity)
    model = build_segmentor(Config.fromfile(osp.join(REPO, DEMO_CBSA)))
    result = model_complexity(model, (96, 160))
    assert result.flops == totals['flops']
    with torch.no_grad():
        feature = model.extract_feat(torch.zeros(1, 3, 96, 160))[-1]
        plain = FlopAnalyzer(model.decode_head, ([feature], ))
        plain.unsupported_ops_warnings(False)
        plain_flops = plain.total()
    head_flops, head_params = decode_head_complexity(model.decode_head,
                                                     feature)
    assert result.module('decode_head') == (head_flops, head_params)
    assert head_flops > plain_flops


def test_project_configs_resolve_by_name(demo_checkpoint):
    from mmengine.infer.infer import BaseInferencer
    from mmseg.apis import MMSegInferencer
    name = osp.splitext(osp.basename(DEMO_CBSA))[0]
    inferencer = MMSegInferencer(model=name, weights=demo_checkpoint,
                                 device='cpu')
    assert osp.samefile(inferencer.cfg.filename, osp.join(REPO, DEMO_CBSA))
    out = inferencer(random_image(*IMAGE_HW))
    assert out['predictions'].shape == IMAGE_HW

    # mmseg's own names keep their meaning; the project's Segmenter configs
    # that share them are reachable under an alias
    lookup = types.SimpleNamespace(scope='mmseg')
    seg = 'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512'
    cfg, weights = BaseInferencer._load_model_from_metafile(lookup, seg)
    assert '.mim' in cfg.filename and weights.startswith('https://')
    cfg, weights = BaseInferencer._load_model_from_metafile(
        lookup, 'mmseg_whitebox:' + seg)
    assert osp.samefile(cfg.filename,
                        osp.join(REPO, 'configs', 'segmenter', seg + '.py'))
    assert weights is None


def test_metafiles_list_every_config_once():
    from mmseg_whitebox.apis import project_models
    models = list(project_models())
    names = [m['Name'] for m in models]
    assert len(names) == len(set(names))
    listed = sorted(osp.relpath(m['Config'], REPO) for m in models)
    assert listed == CONFIGS
    for model in models:
        assert model['Name'] == osp.splitext(
            osp.basename(model['Config']))[0]
        readme = osp.join(osp.dirname(model['Config']), 'README.md')
        with open(readme) as f:
            assert model['Name'] in f.read(), (readme, model['Name'])
