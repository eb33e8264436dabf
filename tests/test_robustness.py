"""The noise evaluator: selections per head type, exact restoration,
reproducibility, ablation, usage ratios, resume, and the CLI."""
import argparse
import glob
import json
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config, DictAction
from mmengine.registry import init_default_scope

from mmseg_whitebox.robustness import (AttentionAblation, AttentionUsage,
                                       LoopEvaluation, NoiseSweep,
                                       NoiseSweepOptions, ParameterNoise,
                                       ResultStore, find_attention_sites, format_summary,
                                       run_noise_sweep, select_layers,
                                       select_parameters)
from mmseg_whitebox.utils.tool_error import InputError, ToolError

from _helpers import (REPO, StubRunner, demo_configs, run_tool,
                      small_run_options)

CONFIGS = demo_configs()
# the documented definition (mmseg_whitebox.models.attention_sites), per layer
EXPECTED = {
    'segmenter': {'attn.attn.in_proj_weight', 'attn.attn.in_proj_bias',
                  'attn.attn.out_proj.weight', 'attn.attn.out_proj.bias'},
    'cbsa': {'attn.proj.weight', 'attn.out_proj.weight', 'attn.out_proj.bias',
             'attn.eta', 'attn.kappa'},
    'cbsa-rigorous': {'attn.proj.weight', 'attn.eta', 'attn.kappa'},
    'cbt': {'attn.proj.weight', 'attn.out_proj.weight', 'attn.out_proj.bias',
            'attn.eta', 'attn.kappa'},
    # the CBSA head on the CRATE and ToST demo encoders
    'crate': {'attn.proj.weight', 'attn.out_proj.weight',
              'attn.out_proj.bias', 'attn.eta', 'attn.kappa'},
    'tost': {'attn.proj.weight', 'attn.out_proj.weight', 'attn.out_proj.bias',
             'attn.eta', 'attn.kappa'},
    'mssa': {'attn.proj.weight', 'attn.step_size'},
    'mssa-ca': {'attn.proj.weight', 'attn.step_size'},
    'tssa': {'attn.proj.weight', 'attn.out_proj.weight', 'attn.out_proj.bias',
             'attn.temp'},
}
LAYERS = {'segmenter': ['layers.0', 'layers.1'],
          'mssa-ca': ['layers.0', 'layers.1', 'layers.2', 'cross_layers.0',
                        'cross_layers.1', 'cross_layers.2']}


def build_model(name, **cfg_changes):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, CONFIGS[name]))
    cfg.model.decode_head.update(cfg_changes)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.eval()


def snapshot(model):
    return {k: v.detach().cpu().numpy().tobytes()
            for k, v in model.state_dict().items()}


def forward(model, seed=1):
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(
        seed))
    with torch.no_grad():
        return model(x, mode='tensor')


@pytest.mark.parametrize('name', list(CONFIGS))
def test_decoder_attention_selection_matches_definition(name):
    model = build_model(name)
    sel = select_parameters(model, 'decoder-attention')
    layers = LAYERS.get(name, ['layers.0', 'layers.1', 'layers.2'])
    expected = {f'decode_head.{layer}.{p}' for layer in layers
                for p in EXPECTED[name]}
    assert {n for n, _ in sel.parameters} == expected
    assert [s.index for s in sel.sites] == list(range(len(layers)))
    # nothing outside attention: no norms, MLPs, class embeddings
    assert not any('norm' in n or 'ffn' in n or 'cls_emb' in n
                   for n, _ in sel.parameters)


def test_other_targets_layers_and_errors():
    model = build_model('cbsa')
    decoder = select_parameters(model, 'decoder')
    assert {n for n, _ in decoder.parameters} == {
        n for n, _ in model.named_parameters() if n.startswith('decode_head')}
    enc = select_parameters(model, 'encoder-attention')
    assert {n for n, _ in enc.parameters} == {
        f'backbone.layers.{i}.attn.attn.{p}' for i in range(4)
        for p in ('in_proj_weight', 'in_proj_bias', 'out_proj.weight',
                  'out_proj.bias')}
    one = select_parameters(model, 'decoder-attention', layers=[1])
    assert {n for n, _ in one.parameters} == {
        f'decode_head.layers.1.{p}' for p in EXPECTED['cbsa']}
    assert one.label == 'decoder-attention[1]'
    regex = select_parameters(model, r'layers\.2\.attn\.(eta|kappa)')
    assert [n for n, _ in regex.parameters] == [
        'decode_head.layers.2.attn.eta', 'decode_head.layers.2.attn.kappa']
    assert [s.name for s in regex.sites] == ['decode_head.layers.2.attn']
    with pytest.raises(ValueError, match='no attention layer'):
        select_parameters(model, 'decoder-attention', layers=[7])
    with pytest.raises(ValueError, match='selects no parameters'):
        select_parameters(model, 'nothing_matches_this')
    # a bad target is the user's input: a ToolError (and a ValueError)
    with pytest.raises(ToolError, match='--target .*regular expression'):
        select_parameters(model, '([')


def test_select_layers_one_selection_per_layer():
    model = build_model('cbsa')
    whole, = select_layers(model, 'decoder-attention')
    assert whole.label == 'decoder-attention' and len(whole.sites) == 3
    each = select_layers(model, 'decoder-attention', 'each')
    assert [s.label for s in each] == [
        f'decoder-attention[{i}]' for i in range(3)]
    for i, sel in enumerate(each):
        assert [s.index for s in sel.sites] == [i]
        assert {n for n, _ in sel.parameters} == {
            f'decode_head.layers.{i}.{p}' for p in EXPECTED['cbsa']}
    assert [s.label for s in select_layers(model, 'decoder', [2, 0])] == [
        'decoder[2]', 'decoder[0]']
    # a regular expression: the layers it touches, indexed in the model
    regex = r'backbone\.layers\.[12]\.attn\.'
    assert [[st.name for st in s.sites]
            for s in select_layers(model, regex, 'each')] == [
                ['backbone.layers.1.attn'], ['backbone.layers.2.attn']]
    with pytest.raises(ValueError, match='"each"'):
        select_layers(model, 'decoder', 'all')
    with pytest.raises(ValueError, match='no attention layer'):
        select_layers(model, 'decoder-attention', [3])


def test_linear_decoder_has_no_attention():
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, CONFIGS['segmenter']))
    cfg.model.decode_head = dict(
        type='FCNHead', in_channels=96, channels=96, num_convs=0,
        concat_input=False, num_classes=150)
    model = MODELS.build(cfg.model)
    with pytest.raises(ValueError, match='--target decoder'):
        select_parameters(model, 'decoder-attention')
    with pytest.raises(ValueError, match='no attention layers'):
        select_layers(model, 'decoder', 'each')


GOOD_SETTINGS = dict(sigmas=[0.0, 0.1], draws=1, mode='relative')


@pytest.mark.parametrize('kwargs, match', [
    (dict(sigmas=[0.1, -1.0]), '--sigmas .*-1.0'),
    (dict(sigmas=[float('inf')]), '--sigmas .*inf'),
    (dict(sigmas=[]), '--sigmas'),
    (dict(draws=0), '--draws'),
    (dict(mode='percent'), '--mode'),
    (dict(max_heads=0), '--max-heads'),
    (dict(angle_images=0), '--angle-images'),
    (dict(layers=['each', '1']), '--layers: "each" or layer indices'),
    (dict(layers=['first']), "--layers .*'first'"),
])
def test_sweep_settings_are_checked_once_when_made(kwargs, match):
    """The options are checked when they are made (by the tool from its
    flags, or by a library user), with a ToolError naming the flag, before
    a model is built; a sensitivity case: the same options with good
    values pass."""
    NoiseSweepOptions(**GOOD_SETTINGS)
    with pytest.raises(ToolError, match=match):
        NoiseSweepOptions(**dict(GOOD_SETTINGS, **kwargs))
    options = NoiseSweepOptions(**GOOD_SETTINGS)
    for key, value in kwargs.items():  # a field changed afterwards
        setattr(options, key, value)
    with pytest.raises(ToolError, match=match):
        options.check()


def test_sweep_layers_as_the_command_line_gives_them():
    assert NoiseSweepOptions(layers=['each']).layers == 'each'
    assert NoiseSweepOptions(layers='each').layers == 'each'
    assert NoiseSweepOptions(layers=['2', '0']).layers == [2, 0]
    assert NoiseSweepOptions(layers=[1]).layers == [1]
    assert NoiseSweepOptions().layers is None


def test_noise_statistics_and_only_selected_parameters_change():
    model = build_model('cbsa')
    sel = select_parameters(model, 'decoder-attention')
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    chosen = {n for n, _ in sel.parameters}
    with ParameterNoise(sel.parameters, 0.05, 'absolute', seed=3):
        deltas = []
        for n, p in model.named_parameters():
            if n in chosen:
                deltas.append((p - before[n]).flatten())
            else:
                assert torch.equal(p, before[n]), n
        std = torch.cat(deltas).std().item()
        assert 0.045 < std < 0.055
    w = dict(model.named_parameters())['decode_head.layers.0.attn.proj.weight']
    rms = w.detach().pow(2).mean().sqrt().item()
    with ParameterNoise(sel.parameters, 0.5, 'relative', seed=3):
        delta = (w - before['decode_head.layers.0.attn.proj.weight'])
        assert 0.45 * rms < delta.std().item() < 0.55 * rms


def test_same_seed_same_noise_other_seed_differs():
    model = build_model('cbsa')
    sel = select_parameters(model, 'decoder-attention')
    outs = []
    for seed in (0, 0, 1):
        with ParameterNoise(sel.parameters, 0.1, seed=seed):
            outs.append(forward(model))
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])


class Boom(Exception):
    pass


@pytest.mark.parametrize('failure', [Boom, KeyboardInterrupt])
def test_bitwise_restoration_on_failure_mid_evaluation(failure):
    model = build_model('mssa-ca')
    before = snapshot(model)
    sel = select_parameters(model, 'decoder')
    calls = []

    def evaluate():
        calls.append(1)
        forward(model)
        if len(calls) == 4:  # clean, ablated, one draw, then fail
            raise failure('injected')
        return dict(mIoU=50.0, aAcc=80.0, mAcc=60.0)

    sweep = NoiseSweep(model, evaluate, [sel],
                       NoiseSweepOptions(sigmas=[0.1, 1.0], draws=2))
    with pytest.raises(failure):
        sweep.run()
    assert len(calls) == 4
    assert snapshot(model) == before
    # the finished draw was kept, the failed one was not
    assert len(sweep.store.partial_draws('decoder', 0.1)) == 1


def test_bitwise_restoration_after_a_sweep_and_interrupted_noise(monkeypatch):
    model = build_model('cbsa')
    before = snapshot(model)
    sel = select_parameters(model, 'decoder-attention')

    def evaluate():
        out = forward(model)
        return dict(mIoU=float(out.abs().mean()), aAcc=0.0, mAcc=0.0)

    NoiseSweep(model, evaluate, [sel],
               NoiseSweepOptions(sigmas=[1e-3, 0.1, 10.0], draws=2)).run()
    assert snapshot(model) == before
    # an interruption while the noise is being added (after 3 parameters
    # were perturbed) also restores
    from mmseg_whitebox.robustness import perturbation
    real_noise_like = perturbation.noise_like
    calls = []

    def interrupting(*args):
        calls.append(1)
        if len(calls) == 4:
            assert snapshot(model) != before  # some noise was added
            raise KeyboardInterrupt
        return real_noise_like(*args)

    monkeypatch.setattr(perturbation, 'noise_like', interrupting)
    with pytest.raises(KeyboardInterrupt):
        with ParameterNoise(list(sel.parameters), 1.0):
            pass
    assert len(calls) == 4 and snapshot(model) == before


def predict(model):
    """A forward in predict mode, through the segmentor's __call__."""
    from mmseg.structures import SegDataSample
    sample = SegDataSample()
    sample.set_metainfo(dict(img_shape=(64, 96), ori_shape=(64, 96),
                             pad_shape=(64, 96)))
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(x, [sample], mode='predict')


def test_nonfinite_predictions_are_recorded_not_fatal():
    model = build_model('tssa')
    sel = select_parameters(model, 'decoder')

    def evaluate():
        predict(model)
        return dict(mIoU=1.0, aAcc=1.0, mAcc=1.0)

    data = NoiseSweep(model, evaluate, [sel],
                      NoiseSweepOptions(sigmas=[1e-3, 1e30], draws=1)).run()
    assert data['clean']['nonfinite_fraction'] == 0
    small, huge = data['points']
    assert small['nonfinite_fraction'] == 0
    assert huge['nonfinite_fraction'] > 0


@pytest.mark.parametrize('name', list(CONFIGS))
def test_ablation_equals_attention_zeroed_by_hand(name):
    model = build_model(name)
    sites = find_attention_sites(model)
    with AttentionAblation(sites):
        ablated = forward(model)
    clean = forward(model)
    assert not torch.allclose(ablated, clean)
    # by hand: every attention layer returns a zero update
    for site in sites:
        if site.convention == 'inside':
            site.attention.forward = (
                lambda query, *a, identity=None, **kw: identity)
        elif name == 'mssa-ca' and 'cross' in site.name:
            site.attention.forward = lambda query, x: torch.zeros_like(query)
        else:
            site.attention.forward = (
                lambda x, *a, **kw: torch.zeros_like(x))
    torch.testing.assert_close(forward(model), ablated, rtol=0, atol=0)


def test_hook_contexts_nest():
    """Leaving an inner context removes its own hooks only: the outer
    ablation still holds, and usage is recorded while both are on."""
    model = build_model('cbsa')
    sites = find_attention_sites(model)
    with AttentionAblation(sites):
        ablated = forward(model)
        with AttentionUsage(sites) as usage:
            forward(model)
        after_inner = forward(model)
    assert usage.ratios[sites[0].name] == [0.0]  # the ablation came first
    torch.testing.assert_close(after_inner, ablated, rtol=0, atol=0)
    assert not torch.allclose(forward(model), ablated)


def test_usage_ratio_on_known_updates():
    """Known cases: an mmcv attention whose update is a constant vector b
    per token (zero output weights, bias b): ratio sqrt(N)*||b|| / ||x||;
    a white-box layer whose operator returns c * LayerNorm(x): ratio
    c*sqrt(N*d)/||x|| (a LayerNorm output has norm sqrt(d) per token)."""
    model = build_model('segmenter')
    site = find_attention_sites(model)[0]
    out_proj = site.attention.attn.out_proj
    with torch.no_grad():
        out_proj.weight.zero_()
        out_proj.bias.copy_(torch.linspace(-1, 1, 96))
    x = torch.randn(2, 20, 96)
    with AttentionUsage([site]) as usage, torch.no_grad():
        model.decode_head.layers[0](x)
    expected = (20**0.5 * out_proj.bias.detach().norm() /
                x.flatten(1).norm(dim=1))
    np.testing.assert_allclose(usage.ratios[site.name], expected, rtol=1e-5)
    rows = usage.summary()
    assert rows[0]['images'] == 2 and rows[0]['layer'] == 0

    model = build_model('cbsa')
    site = find_attention_sites(model)[1]
    site.attention.forward = lambda x, **kw: 0.25 * x
    x = torch.randn(3, 30, 96) * 4
    with AttentionUsage([site]) as usage, torch.no_grad():
        model.decode_head.layers[1](x, hw=(5, 6))
    expected = 0.25 * (30 * 96)**0.5 / x.flatten(1).norm(dim=1)
    np.testing.assert_allclose(usage.ratios[site.name], expected, rtol=1e-3)


def test_resume_skips_finished_points_and_draws(tmp_path):
    model = build_model('cbsa')
    sel = select_parameters(model, 'decoder-attention')
    calls = []

    def evaluate():
        calls.append(1)
        return dict(mIoU=float(len(calls)), aAcc=1.0, mAcc=1.0)

    setup = dict(mode='absolute', num_seeds=2, target='decoder-attention')
    NoiseSweep(model, evaluate, [sel],
               NoiseSweepOptions(sigmas=[0.01, 0.1], draws=2),
               store=ResultStore(str(tmp_path), setup)).run()
    assert len(calls) == 2 + 2 * 2  # clean, ablated, 2 sigmas x 2 draws
    with pytest.raises(ToolError, match='--resume'):
        ResultStore(str(tmp_path), setup)
    with pytest.raises(ToolError, match='--resume'):
        ResultStore.check_out_dir(str(tmp_path))
    ResultStore.check_out_dir(str(tmp_path), resume=True)
    ResultStore.check_out_dir(str(tmp_path / 'new'))
    with pytest.raises(ValueError, match='num_seeds'):
        ResultStore(str(tmp_path), dict(setup, num_seeds=3), resume=True)
    # other --cfg-options (e.g. slide instead of whole inference) would mix
    # results of different settings; a tuple compares as its stored list
    options = dict(setup, cfg_options={'model.test_cfg.crop_size': (8, 8)})
    ResultStore(str(tmp_path / 'opts'), options).save()
    ResultStore(str(tmp_path / 'opts'), options, resume=True)
    with pytest.raises(ValueError, match='cfg_options'):
        ResultStore(str(tmp_path / 'opts'), dict(
            options, cfg_options={'model.test_cfg.mode': 'slide'}),
            resume=True)
    calls.clear()
    store = ResultStore(str(tmp_path), setup, resume=True)
    sweep = NoiseSweep(model, evaluate, [sel],
                       NoiseSweepOptions(sigmas=[0.01, 0.1, 1.0], draws=2),
                       store=store)
    assert sweep.num_evaluations == 2
    data = sweep.run()
    assert len(calls) == 2  # only sigma 1.0
    assert [p['sigma'] for p in data['points']] == [0.01, 0.1, 1.0]
    with open(tmp_path / 'results.csv') as f:
        lines = f.read().strip().splitlines()
    assert lines[0].startswith('kind,selection,sigma')
    assert [ln.split(',')[0] for ln in lines[1:]] == [
        'clean', 'ablated', 'noise', 'noise', 'noise']


def test_loop_evaluation_with_real_metric(tiny_ade):
    """The library API on a model, dataloader and evaluator built by
    hand, with mmseg's dataset, pipeline and IoUMetric."""
    from mmengine.runner import Runner
    cfg = Config.fromfile(osp.join(REPO, CONFIGS['cbsa']))
    cfg.test_dataloader.dataset.data_root = tiny_ade
    cfg.test_dataloader.num_workers = 0
    cfg.test_dataloader.persistent_workers = False
    model = build_model('cbsa')
    loader = Runner.build_dataloader(cfg.test_dataloader)
    evaluate = LoopEvaluation(model, loader, cfg.test_evaluator)
    sel = select_parameters(model, 'decoder-attention')
    data = NoiseSweep(model, evaluate, [sel],
                      NoiseSweepOptions(sigmas=[0.0, 0.5], draws=2)).run()
    clean = data['clean']['mIoU']
    zero = [p for p in data['points'] if p['sigma'] == 0.0][0]
    assert len(zero['draws']) == 1 and zero['mIoU_mean'] == clean
    assert 0 <= data['points'][1]['mIoU_mean'] <= 100


@pytest.fixture(scope='module')
def checkpoint(tiny_ade, tiny_checkpoint):
    return dict(ckpt=tiny_checkpoint(CONFIGS['cbsa-rigorous']),
                data_root=tiny_ade)


@pytest.mark.slow
def test_cli_sigma_zero_reproduces_test_tool_and_resumes(checkpoint,
                                                         tmp_path):
    opts = ['--cfg-options'] + small_run_options(checkpoint['data_root'], 4)
    run_tool(['tools/test.py', CONFIGS['cbsa-rigorous'], checkpoint['ckpt'],
              '--work-dir', str(tmp_path / 'test')] + opts)
    with open(glob.glob(str(tmp_path / 'test' / '*' / '*.json'))[0]) as f:
        test_miou = json.load(f)['mIoU']
    out = tmp_path / 'sweep'
    cmd = ['tools/noise_robustness.py', CONFIGS['cbsa-rigorous'],
           checkpoint['ckpt'], '--sigmas', '0', '0.05', '--draws', '2',
           '--out', str(out), '--work-dir', str(tmp_path / 'w')]
    proc = run_tool(cmd + opts)
    assert 'decode_head.layers.0.attn.proj.weight' in proc.stdout
    assert 'attention usage' in proc.stdout
    with open(out / 'results.json') as f:
        data = json.load(f)
    assert data['clean']['mIoU'] == test_miou
    assert data['points'][0]['sigma'] == 0 and \
        data['points'][0]['mIoU_mean'] == test_miou
    for name in ('results.csv', 'attention_usage.csv', 'robustness.png'):
        assert (out / name).is_file(), name
    # existing results are never overwritten silently
    again = run_tool(cmd + opts, check=False)
    assert again.returncode == 2 and '--resume' in again.stderr
    assert 'noise_robustness.py: error: ' in again.stderr
    # resume: only the new sigma runs
    resumed = run_tool(cmd[:4] + ['0', '0.05', '0.5'] + cmd[6:] +
                       ['--resume'] + opts)
    assert '2/2' in resumed.stdout  # 2 evaluations: sigma 0.5 x 2 draws
    with open(out / 'results.json') as f:
        assert [p['sigma'] for p in json.load(f)['points']] == [0, 0.05,
                                                                 0.5]
    # per-layer sweeps and comparison plots
    layered = tmp_path / 'layers'
    run_tool(['tools/noise_robustness.py', CONFIGS['cbsa-rigorous'],
              checkpoint['ckpt'], '--sigmas', '0.1', '--draws', '1',
              '--layers', 'each', '--mode', 'relative', '--no-ablation',
              '--out', str(layered), '--compare', str(out), '--work-dir',
              str(tmp_path / 'w2')] + opts)
    with open(layered / 'results.json') as f:
        labels = [p['selection'] for p in json.load(f)['points']]
    assert labels == ['decoder-attention[0]', 'decoder-attention[1]',
                      'decoder-attention[2]']
    plot = run_tool(['tools/analysis_tools/plot_robustness.py', str(out),
                     str(layered), '--out-file', str(tmp_path / 'cmp.png')])
    assert (tmp_path / 'cmp.png').is_file(), plot.stdout


def parsed_cfg_options(options):
    """``--cfg-options`` items as the tools parse them."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args(['--cfg-options'] + options).cfg_options


def test_a_bug_inside_a_sweep_is_not_reported_as_bad_input(tmp_path,
                                                           monkeypatch):
    """``run_noise_sweep`` translates nothing: a ValueError raised deep in
    the sweep (here by the evaluation, on a stub Runner) comes out as it
    is, so the tool exits 1 with its traceback; only a ToolError is the
    user's."""
    from mmseg_whitebox.cli.errors import user_error_message
    from mmseg_whitebox.robustness import noise_robustness
    from mmseg_whitebox.robustness.evaluation import RunnerEvaluation
    model = build_model('cbsa')
    monkeypatch.setattr(noise_robustness, 'runner_config',
                        lambda *args: Config(dict(launcher='none')))
    monkeypatch.setattr(noise_robustness, 'build_test_runner',
                        lambda *args: StubRunner(model))

    def boom(self):
        raise ValueError('boom')

    monkeypatch.setattr(RunnerEvaluation, '__call__', boom)
    options = NoiseSweepOptions(sigmas=[0.05], draws=1,
                                out=str(tmp_path / 'sweep'),
                                shared_encoder=False, progress=False)
    with pytest.raises(ValueError, match='^boom$') as raised:
        run_noise_sweep('config.py', 'ckpt.pth', options,
                        log=lambda msg: None)
    assert type(raised.value) is ValueError
    assert user_error_message(raised.value) is None  # a bug: exit 1
    assert user_error_message(InputError('boom')) == 'boom'


def test_run_noise_sweep_is_the_tool_as_a_library(checkpoint, tmp_path):
    """``run_noise_sweep`` gives the tool's results (same draws, same
    metrics), its plot and its printout; bad settings fail before a model
    is built."""
    opts = small_run_options(checkpoint['data_root'], 4)
    cfg_options = parsed_cfg_options(opts)
    config = osp.join(REPO, CONFIGS['cbsa-rigorous'])
    tool_out = tmp_path / 'tool'
    run_tool(['tools/noise_robustness.py', config, checkpoint['ckpt'],
              '--sigmas', '0.05', '--draws', '2', '--out', str(tool_out),
              '--work-dir', str(tmp_path / 'w1'), '--cfg-options'] + opts)
    options = NoiseSweepOptions(sigmas=[0.05], draws=2,
                                out=str(tmp_path / 'lib'),
                                work_dir=str(tmp_path / 'w2'),
                                cfg_options=cfg_options, progress=False)
    lines = []
    data = run_noise_sweep(config, checkpoint['ckpt'], options,
                           log=lines.append)
    with open(tool_out / 'results.json') as f:
        tool = json.load(f)

    def figures(results):
        return ([results['clean']['mIoU']] +
                [(p['selection'], p['sigma'], p['mIoU_mean'], p['mIoU_min'],
                  p['mIoU_max']) for p in results['points']])

    assert figures(data) == figures(tool)
    assert (tmp_path / 'lib' / 'robustness.png').is_file()
    assert any('decode_head.layers.0.attn.proj.weight' in line
               for line in lines)
    summary = format_summary(data, 'demo')
    assert f'clean: mIoU {data["clean"]["mIoU"]:.2f}' in summary
    assert 'attention usage' in summary
    # an existing results folder, a negative sigma: refused first
    with pytest.raises(ToolError, match='--resume'):
        run_noise_sweep(config, 'no-such.pth',
                        NoiseSweepOptions(out=str(tool_out)))
    with pytest.raises(ToolError, match='sigmas'):
        run_noise_sweep(config, 'no-such.pth',
                        NoiseSweepOptions(sigmas=[-1.0]))


def test_per_image_statistics_are_put_together_over_ranks(monkeypatch):
    """Two ranks' per-image values (rank 1's last image a padded copy of
    image 0) in the data set's order, the padding cut off; the non-finite
    fraction over them is summed counts over summed logits."""
    import mmengine.dist
    from mmseg_whitebox.engine.hooks import NonFiniteCounter
    from mmseg_whitebox.utils.per_image import gather_images
    parts = [['a', 'c', 'e'], ['b', 'd', 'a']]
    monkeypatch.setattr(mmengine.dist, 'get_world_size', lambda: 2)
    monkeypatch.setattr(mmengine.dist, 'all_gather_object',
                        lambda values: parts)
    assert gather_images(parts[0], 5) == ['a', 'b', 'c', 'd', 'e']
    assert gather_images(parts[0]) == ['a', 'b', 'c', 'd', 'e', 'a']
    parts[:] = [[(4, 10), (0, 10)], [(1, 10), (4, 10)]]
    counter = NonFiniteCounter()
    assert counter.fraction_over_ranks(3) == 5 / 30
