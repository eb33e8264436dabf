"""Every bad input a user can give the tools is one line naming the cause
and the fix, exit status 2, and changes no file that existed before.

Run through the real command lines (as tests/test_tools_e2e.py does); most
cases fail before a model is built. A few check the package's pieces
directly (the translation of errors, atomic writes, resume settings).
"""
import hashlib
import json
import os
import os.path as osp
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from _helpers import (DEMO_SEGMENTER, REPO, raised_by, run_tool,
                      small_run_options)
from test_converters import timm_layout_weights, write_augreg_arrays

DEMO_CBSA = osp.join('configs', 'cbsa',
                     'cbsa_vit-demo_1xb8-800iter_synthade-128x128.py')
REL_SEGMENTER = osp.relpath(DEMO_SEGMENTER, REPO)


# ------------------------------------------------------------- helpers

def snapshot(*folders) -> dict:
    """Path -> SHA-256 of every file under ``folders``."""
    files = {}
    for folder in folders:
        for root, _, names in os.walk(folder):
            for name in names:
                path = osp.join(root, name)
                with open(path, 'rb') as f:
                    files[path] = hashlib.sha256(f.read()).hexdigest()
    return files


def assert_one_line_error(proc, tool: str, *words: str) -> str:
    """Exit status 2, the last stderr line is ``<tool>: error: ...``
    naming ``words`` and (unless argparse wrote it) ending with the
    ``--debug`` hint, and no traceback; returns the message."""
    from mmseg_whitebox.cli.errors import DEBUG_HINT
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    # mmcv's warning without compiled ops is silenced on either stack
    # (mmseg_whitebox.compat.MSDA_WARNING)
    assert 'MultiScaleDeformableAttention' not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    prefix = f'{tool}: error: '
    assert last.startswith(prefix), proc.stderr[-3000:]
    if not last.startswith(f'{prefix}argument '):  # argparse's own
        assert last.endswith(f' {DEBUG_HINT}'), last
        last = last[:-len(DEBUG_HINT) - 1]
    for word in words:
        assert word in last, (word, last)
    return last[len(prefix):]


def tool_fails(argv, tool, *words, unchanged=()):
    """Run ``argv``; it must fail with one line naming ``words`` and leave
    every file that was under ``unchanged`` as it was."""
    before = snapshot(*unchanged)
    proc = run_tool(argv, check=False, timeout=300)
    message = assert_one_line_error(proc, tool, *words)
    after = snapshot(*unchanged)
    assert {p: after.get(p) for p in before} == before
    return message


@pytest.fixture
def image(tmp_path):
    path = tmp_path / 'in' / 'photo.png'
    path.parent.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(
        0, 255, (40, 48, 3), dtype=np.uint8)).save(path)
    return str(path)




def demo(image_path, checkpoint, *extra):
    return ['tools/image_demo.py', image_path, DEMO_SEGMENTER, checkpoint,
            *extra]


# -------------------------------------------------------------- configs

@pytest.mark.parametrize('content,name,words', [
    ('', 'empty.py', ['is empty']),
    ('model = dict(type=\n', 'broken.py', ['not valid Python',
                                           'line 1', "'(' was never"]),
    (b'PK\x03\x04\xff\xfe\x00', 'weights.py', ['not a text file']),
    ('x = 1\n', 'weights.pth', ['not a config file', '.pth',
                                'config comes before the checkpoint']),
    ('x = 1\n', 'no_model.py', ['defines no model']),
])
def test_config_file_problems(tmp_path, content, name, words):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    tool_fails(['tools/train.py', str(path), '--work-dir',
                str(tmp_path / 'w')], 'train.py', str(path), *words,
               unchanged=[tmp_path])
    assert not (tmp_path / 'w').exists()  # nothing was started


def test_syntax_error_in_a_base_config(tmp_path):
    (tmp_path / 'base.py').write_text('x = dict(\n')
    (tmp_path / 'child.py').write_text("_base_ = ['./base.py']\n")
    tool_fails(['tools/train.py', str(tmp_path / 'child.py')],
               'train.py', 'base.py', 'not valid Python')


def test_cfg_options_without_a_value(image, weights, tmp_path):
    tool_fails(demo(image, weights, '--out-file', str(tmp_path / 'o.png'),
                    '--cfg-options', 'model.decode_head'),
               'image_demo.py', "'model.decode_head' is not KEY=VALUE",
               'num_classes=19', unchanged=[tmp_path])


@pytest.mark.parametrize('option,words', [
    ('model.backbone.type=VisionTransformr',
     ["unknown type 'VisionTransformr'", 'mmseg::model',
      "did you mean 'VisionTransformer'"]),
    ('model.decode_head.num_clases=19',
     ['SegmenterMaskTransformerHead', "setting 'num_clases'",
      "did you mean 'num_classes'"]),
    ('model.decode_head.num_classes=0',
     ['model.decode_head.num_classes=0 is impossible', '>= 1']),
    ('test_dataloader.batch_size=0',
     ['test_dataloader.batch_size=0 is impossible']),
])
def test_impossible_or_misspelt_settings(image, weights, tmp_path, option,
                                         words):
    tool_fails(demo(image, weights, '--out-file', str(tmp_path / 'o.png'),
                    '--cfg-options', option), 'image_demo.py', *words,
               unchanged=[tmp_path])
    assert not (tmp_path / 'o.png').exists()


def test_debug_shows_the_traceback(image, weights, tmp_path, monkeypatch):
    """--debug (or MMSEG_WHITEBOX_DEBUG=1): the traceback, then the same
    one line and status."""
    argv = demo(image, weights, '--out-file', str(tmp_path / 'o.png'),
                '--cfg-options', 'model.decode_head.num_clases=19')
    monkeypatch.delenv('MMSEG_WHITEBOX_DEBUG', raising=False)
    for extra, env in ((['--debug'], None), ([], '1')):
        if env:
            monkeypatch.setenv('MMSEG_WHITEBOX_DEBUG', env)
        proc = run_tool(argv + extra, check=False, timeout=300)
        assert proc.returncode == 2
        assert 'Traceback' in proc.stderr and "does not take the setting " \
            "'num_clases'" in proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith('image_demo.py: error: model.decode_head: '
                               'SegmenterMaskTransformerHead')
        assert '--debug' not in last  # no hint: the traceback is there


# ------------------------------------------------- devices and outputs

@pytest.mark.skipif(torch.cuda.is_available(), reason='needs a CPU-only '
                    'machine')
def test_cuda_device_on_a_cpu_machine(image, weights, tmp_path):
    tool_fails(demo(image, weights, '--out-file', str(tmp_path / 'o.png'),
                    '--device', 'cuda'), 'image_demo.py', '--device cuda',
               'no CUDA device', '--device cpu', unchanged=[tmp_path])


def test_unwritable_output_is_refused_before_the_model(image, tmp_path):
    """The output folder is checked first: the checkpoint does not even
    exist, and the message is about the folder."""
    blocker = tmp_path / 'a_file'
    blocker.write_text('x')
    tool_fails(demo(image, 'missing.pth', '--out-file',
                    str(blocker / 'o.png')), 'image_demo.py', str(blocker),
               'is a file', unchanged=[tmp_path])
    tool_fails(['tools/noise_robustness.py', DEMO_SEGMENTER, 'missing.pth',
                '--out', str(blocker / 'sweep')], 'noise_robustness.py',
               '--out', 'is a file', unchanged=[tmp_path])
    tool_fails(['tools/test.py', DEMO_SEGMENTER, 'missing.pth', '--out',
                str(blocker)], 'test.py', '--out', 'is a file',
               unchanged=[tmp_path])


def test_unknown_output_formats(image, weights, tmp_path):
    tool_fails(demo(image, weights, '--out-file', str(tmp_path / 'o.xyz')),
               'image_demo.py', 'OpenCV cannot write .xyz', '*.png',
               unchanged=[tmp_path])
    tool_fails(['tools/deployment/export_onnx.py', DEMO_SEGMENTER, weights,
                '--shape', '64', '64', '--out-file',
                str(tmp_path / 'model.txt')],
               'export_onnx.py', 'unknown output format .txt', '*.onnx',
               unchanged=[tmp_path])


def test_output_over_an_input_is_refused(image, weights, tmp_path):
    before = snapshot(osp.dirname(image))
    tool_fails(demo(image, weights, '--out-file', image), 'image_demo.py',
               'is the input', 'new file')
    assert snapshot(osp.dirname(image)) == before
    tool_fails(['tools/deployment/export_onnx.py', DEMO_SEGMENTER, weights,
                '--shape', '64', '64', '--out-file', str(tmp_path / 'x.onnx'),
                '--json', weights], 'export_onnx.py', '--json', 'is the '
               'input', unchanged=[osp.dirname(weights)])


# --------------------------------------------------------- input files

def test_non_image_and_single_pixel_inputs(weights, tmp_path):
    text = tmp_path / 'notes.png'
    text.write_text('not an image')
    tool_fails(demo(str(text), weights, '--out-file',
                    str(tmp_path / 'o.png')), 'image_demo.py', str(text),
               'not an image', unchanged=[tmp_path])
    dot = tmp_path / 'dot.png'
    Image.fromarray(np.zeros((1, 1, 3), np.uint8)).save(dot)
    tool_fails(demo(str(dot), weights, '--out-file',
                    str(tmp_path / 'o.png')), 'image_demo.py', str(dot),
               '1x1 pixels', unchanged=[tmp_path])


def test_truncated_checkpoint_is_not_called_a_text_file(weights, tmp_path):
    data = open(weights, 'rb').read()
    cut = tmp_path / 'iter_800.pth'
    cut.write_bytes(data[:len(data) // 2])
    message = tool_fails(['tools/test.py', DEMO_SEGMENTER, str(cut)],
                         'test.py', str(cut), 'is truncated',
                         'earlier iter_*.pth', unchanged=[tmp_path])
    assert 'text file' not in message


def test_truncated_and_foreign_safetensors(tmp_path):
    from safetensors.torch import save_file
    whole = tmp_path / 'vit.safetensors'
    save_file({'cls_token': torch.zeros(1, 1, 8)}, str(whole))
    cut = tmp_path / 'cut.safetensors'
    cut.write_bytes(whole.read_bytes()[:40])
    (tmp_path / 'dst.pth').write_bytes(b'the old DST')
    tool_fails(['tools/model_converters/timm2mmseg.py', str(cut),
                str(tmp_path / 'dst.pth')], 'timm2mmseg.py', str(cut),
               'not a complete safetensors file', unchanged=[tmp_path])


def test_sixteen_bit_label_is_not_read_modulo_256(tiny_ade, weights,
                                                  tmp_path):
    """Class 258 in a 16-bit PNG would become class 2 in mmseg's uint8
    cast: an error naming the file and the values."""
    root = str(tmp_path / 'ADEChallengeData2016')
    shutil.copytree(tiny_ade, root)
    label = osp.join(root, 'annotations', 'validation',
                     'ADE_val_00000001.png')
    values = np.array(Image.open(label)).astype(np.uint16)
    values[0, :2] = 258
    Image.fromarray(values).save(label)
    assert Image.open(label).mode == 'I;16'
    tool_fails(['tools/test.py', DEMO_SEGMENTER, weights, '--work-dir',
                str(tmp_path / 'w'), '--cfg-options',
                f'test_dataloader.dataset.data_root={root}',
                'test_dataloader.num_workers=0',
                'test_dataloader.persistent_workers=False'], 'test.py',
               label, '[258]', 'silently become [2]', '8-bit',
               unchanged=[root])


# ---------------------------------------------------------------- sweeps

@pytest.mark.parametrize('sigmas', [['0', 'inf'], ['nan'], ['-0.1']])
def test_non_finite_or_negative_sigmas(tmp_path, sigmas):
    out = tmp_path / 'sweep'
    tool_fails(['tools/noise_robustness.py', DEMO_SEGMENTER, 'missing.pth',
                '--out', str(out), '--sigmas', *sigmas],
               'noise_robustness.py', 'sigmas must be finite and >= 0',
               sigmas[-1])
    assert not out.exists()


def test_truncated_results_on_resume_names_the_file(tmp_path):
    out = tmp_path / 'sweep'
    out.mkdir()
    results = out / 'results.json'
    results.write_text('{"setup": {"config": "configs/x.py"}, "clean": {"m')
    tool_fails(['tools/noise_robustness.py', DEMO_SEGMENTER, 'missing.pth',
                '--out', str(out), '--resume'], 'noise_robustness.py',
               str(results), 'is damaged', 'without --resume',
               unchanged=[out])


def test_resume_accepts_the_same_config_by_another_path(tmp_path):
    """The resolved config is compared, not the path string; an edited
    copy is another config."""
    from mmseg_whitebox.robustness.sweep import ResultStore
    setup = dict(config=REL_SEGMENTER, checkpoint='w.pth', mode='absolute')
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        ResultStore(str(tmp_path / 'sweep'), setup).save()
        for same in ('./' + REL_SEGMENTER, DEMO_SEGMENTER):
            ResultStore(str(tmp_path / 'sweep'), dict(setup, config=same,
                                                      checkpoint='./w.pth'),
                        resume=True)
        edited = tmp_path / 'edited.py'
        edited.write_text(f'_base_ = [{DEMO_SEGMENTER!r}]\n'
                          'model = dict(decode_head=dict(num_layers=1))\n')
        with pytest.raises(ValueError, match='resolves to other settings'):
            ResultStore(str(tmp_path / 'sweep'),
                        dict(setup, config=str(edited)), resume=True)
    finally:
        os.chdir(cwd)


def test_resume_in_the_work_dir_of_another_model(tiny_ade, tiny_checkpoint,
                                                 tmp_path):
    work = tmp_path / 'work'
    work.mkdir()
    shutil.copy(tiny_checkpoint(DEMO_SEGMENTER), work / 'iter_4.pth')
    (work / 'last_checkpoint').write_text(str(work / 'iter_4.pth'))
    tool_fails(['tools/train.py', DEMO_CBSA, '--work-dir', str(work),
                '--resume', '--cfg-options'] +
               small_run_options(tiny_ade, iters=6), 'train.py',
               '--resume', 'iter_4.pth', 'checkpoint of another model',
               'its own --work-dir', unchanged=[work])


# --------------------------------------------------- converters, export

def test_converter_never_overwrites_its_source(tmp_path):
    src = tmp_path / 'vit.pth'
    torch.save({'cls_token': torch.zeros(1, 1, 8)}, src)
    tool_fails(['tools/model_converters/timm2mmseg.py', str(src),
                str(src)], 'timm2mmseg.py', 'is the input', str(src),
               unchanged=[tmp_path])
    tool_fails(['tools/model_converters/timm2mmseg.py', str(src),
                str(tmp_path / '.' / 'vit.pth')], 'timm2mmseg.py',
               'is the input', unchanged=[tmp_path])


def test_npz_missing_a_key_writes_nothing(tmp_path):
    """A JAX ViT .npz without one of its arrays: one line naming it."""
    arrays = write_augreg_arrays(timm_layout_weights())
    key = 'Transformer/encoderblock_0/MultiHeadDotProductAttention_1/' \
        'value/kernel'
    del arrays[key]
    src, dst = tmp_path / 'vit.npz', tmp_path / 'dst.pth'
    np.savez(src, **arrays)
    dst.write_bytes(b'weights converted earlier')
    tool_fails(['tools/model_converters/timm2mmseg.py', str(src), str(dst)],
               'timm2mmseg.py', str(src), repr(key),
               'not a complete JAX ViT', unchanged=[tmp_path])


def test_empty_state_dict_writes_nothing(tmp_path):
    src, dst = tmp_path / 'empty.pth', tmp_path / 'dst.pth'
    torch.save({}, src)
    dst.write_bytes(b'weights converted earlier')
    tool_fails(['tools/model_converters/timm2mmseg.py', str(src), str(dst)],
               'timm2mmseg.py', 'holds no tensors', 'nothing was written',
               unchanged=[tmp_path])


def test_export_refuses_an_opset_it_cannot_write(weights, tmp_path):
    pytest.importorskip('onnx')
    pytest.importorskip('onnxscript')
    pytest.importorskip('onnxruntime')
    tool_fails(['tools/deployment/export_onnx.py', DEMO_SEGMENTER, weights,
                '--shape', '64', '64', '--out-file', str(tmp_path / 'm.onnx'),
                '--opset', '11'], 'export_onnx.py', '--opset 11',
               'opset 18 or newer', unchanged=[tmp_path])
    assert not (tmp_path / 'm.onnx').exists()


# ---------------------------------------------------- optional packages

#: a family of mmseg's own configs per optional package it needs: (the
#: config under mmseg's .mim/configs, the setting the message names)
NEEDS_PACKAGE = {
    'mmdet': ('maskformer/maskformer_r50-d32_8xb2-160k_ade20k-512x512.py',
              "model.decode_head.pixel_decoder.type 'mmdet.PixelDecoder'"),
    'mmpretrain': (
        'convnext/convnext-tiny_upernet_8xb2-amp-160k_ade20k-512x512.py',
        "model.backbone.type 'mmpretrain.ConvNeXt'"),
    'mmcv._ext': ('ccnet/ccnet_r50-d8_4xb4-80k_ade20k-512x512.py',
                  "model.decode_head.type 'CCHead' "
                  '(mmcv.ops.CrissCrossAttention)'),
}


def missing_package_message(package: str) -> str:
    """What the tools say for the config of ``package`` here (skips
    where the package is installed)."""
    from mmseg_whitebox.engine.optional_packages import missing_package_error
    error = missing_package_error(package, NEEDS_PACKAGE[package][1])
    if error is None:
        pytest.skip(f'{package} is installed here')
    return str(error)


def tool_argv(tool: str, config: str, weights: str, image: str,
              out: str) -> list:
    """The command line of ``tool`` for ``config``: train, test and the
    noise sweep read the config first (a checkpoint that does not exist
    is never looked at); the others check their checkpoint (and image)
    first."""
    return {
        'train.py': ['tools/train.py', config, '--work-dir', out],
        'test.py': ['tools/test.py', config, 'missing.pth'],
        'noise_robustness.py': ['tools/noise_robustness.py', config,
                                'missing.pth', '--out', out],
        'test_corruption_robustness.py': [
            'tools/analysis_tools/test_corruption_robustness.py', config,
            weights, '--out', out],
        'image_demo.py': ['tools/image_demo.py', image, config, weights,
                          '--out-file', osp.join(out, 'o.png')],
        'export_onnx.py': ['tools/deployment/export_onnx.py', config,
                           weights, '--shape', '64', '64', '--out-file',
                           osp.join(out, 'm.onnx')],
    }[tool]


@pytest.mark.parametrize('tool,package', [
    (tool, package) for tool in ('train.py', 'test.py', 'noise_robustness.py')
    for package in NEEDS_PACKAGE] + [
    ('image_demo.py', 'mmdet'), ('test_corruption_robustness.py',
                                 'mmpretrain'),
    ('export_onnx.py', 'mmcv._ext')])
def test_config_needing_a_missing_package(tool, package, weights, image,
                                          tmp_path):
    """A config inheriting mmseg's MaskFormer (mmdet), ConvNeXt
    (mmpretrain) or CCNet (mmcv's compiled ops): one line naming the
    package and how to install it, exit status 2, nothing written."""
    expected = missing_package_message(package)
    if tool == 'export_onnx.py':
        from mmseg_whitebox.deployment.onnx_export import export_problem
        if export_problem():  # said first (the legacy stack's torch 2.1)
            pytest.skip(export_problem())
    config = tmp_path / 'inherits.py'
    config.write_text(f"_base_ = ['mmseg::{NEEDS_PACKAGE[package][0]}']\n")
    out = tmp_path / 'out'
    message = tool_fails(tool_argv(tool, str(config), weights, image,
                                   str(out)), tool, unchanged=[tmp_path])
    assert message == expected
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_missing_package_error_names_only_optional_packages(tmp_path):
    """The library side: an optional package that is missing is an
    InputError (for a setting's type, a class needing compiled ops and
    the config's custom_imports); anything else stays the bug it is."""
    from mmseg_whitebox.engine.config import read_config
    from mmseg_whitebox.engine.optional_packages import (
        OPTIONAL_PACKAGES, missing_package_error)
    from mmseg_whitebox.utils.tool_error import InputError
    assert missing_package_error('torch', 'x') is None  # installed
    assert missing_package_error('no_such_module', 'x') is None  # a bug
    assert missing_package_error(None, 'x') is None
    expected = missing_package_message('mmdet')
    assert OPTIONAL_PACKAGES['mmdet'][0] in expected
    config = tmp_path / 'imports.py'
    config.write_text(f"_base_ = [{DEMO_SEGMENTER!r}]\n"
                      "custom_imports = dict(imports=['mmdet.models'])\n")
    with pytest.raises(InputError,
                       match=r"^custom_imports \['mmdet.models'\] needs "
                       r'MMDetection \(mmdet\)'):
        read_config(str(config))
    config.write_text(config.read_text().replace('mmdet.models',
                                                 'no_such_module'))
    with pytest.raises(ImportError) as info:
        read_config(str(config))
    assert not isinstance(info.value, InputError)


# ------------------------------------------------------- the pieces

def test_only_user_errors_are_translated(tmp_path):
    """A bug keeps its traceback: no message for errors no input causes.
    A JSON file a user gives is read by code that says so; any other
    JSONDecodeError (e.g. of a child process's output) is a bug."""
    from mmseg_whitebox.cli.errors import user_error_message
    from mmseg_whitebox.utils.atomic import read_json
    for bug in (RuntimeError('shape mismatch in matmul'), KeyError('x'),
                TypeError("f() got an unexpected keyword argument 'y'"),
                ZeroDivisionError('division by zero'),
                raised_by(lambda: json.loads('{"a": 1'))):
        assert user_error_message(bug) is None, bug
    damaged = tmp_path / 'results.json'
    damaged.write_text('{"a": 1')
    message = user_error_message(raised_by(lambda: read_json(str(damaged))))
    assert str(damaged) in message and 'is damaged' in message


def test_atomic_write_keeps_the_old_file_on_a_crash(tmp_path):
    from mmseg_whitebox.utils.atomic import atomic_open, write_json
    path = tmp_path / 'results.json'
    write_json(str(path), {'done': 1})
    with pytest.raises(RuntimeError):
        with atomic_open(str(path)) as f:
            f.write('{"done": ')
            raise RuntimeError('killed half-way')
    assert json.loads(path.read_text()) == {'done': 1}
    assert os.listdir(tmp_path) == ['results.json']  # no temporary left
