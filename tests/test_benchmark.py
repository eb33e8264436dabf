"""The operators against the straightforward CBT decoder, mixed
precision, linear memory, the measurement helpers and the decoder
benchmark tool."""
import json
import math
import os.path as osp

import pytest
import torch
from mmengine.registry import init_default_scope

from mmseg_whitebox.analysis import memory
from mmseg_whitebox.analysis.benchmark import (Benchmark, BenchmarkOptions,
                                               new_row)
from mmseg_whitebox.analysis.memory import extrapolate_loglog, peak_memory
from mmseg_whitebox.analysis.report import loglog_slope
from mmseg_whitebox.analysis.timing import time_interleaved
from mmseg_whitebox.analysis.decoder_benchmark import \
    StraightforwardCBSADecoder
from mmseg_whitebox.ops import CBSA, TSSA
from mmseg_whitebox.utils.tool_error import InputError

from _helpers import DEMO_MODELS, REPO, run_tool, skip_without_cpu_autocast

BENCH = 'tools/analysis_tools/benchmark_decoders.py'


def build_head(cfg):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    head = MODELS.build(dict(cfg, in_channels=48, channels=48,
                             num_classes=9))
    head.init_weights()
    return head


@pytest.mark.parametrize('out_proj', ['linear', 'tied'])
def test_cbsa_head_equals_the_straightforward_decoder(out_proj):
    """Same outputs (to 1e-5) and same gradients on a non-square grid."""
    torch.manual_seed(0)
    head = build_head(dict(type='CBSAHead',
                           attn_cfg=dict(type='CBSA', num_heads=3,
                                         head_dim=8, rep_grid=(3, 4),
                                         out_proj=out_proj)))
    straight = StraightforwardCBSADecoder(head)
    feature = torch.randn(2, 48, 7, 10)
    out = head([feature])
    torch.testing.assert_close(out, straight([feature]), atol=1e-5,
                               rtol=1e-5)
    # gradients: compared in double precision (fp32 sums over many
    # elements differ in the last bits)
    head.double()
    feature = feature.double().requires_grad_()
    weight = torch.randn_like(out).double()
    inputs = [feature] + list(head.parameters())
    grads = torch.autograd.grad((head([feature]) * weight).sum(), inputs)
    ref = torch.autograd.grad((straight([feature]) * weight).sum(), inputs)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)


SMALL = dict(num_heads=2, head_dim=8)
HEADS = {
    'cbsa': dict(type='CBSAHead',
                 attn_cfg=dict(SMALL, type='CBSA', rep_grid=(2, 2))),
    'cbsa-rigorous': dict(type='CBSAHead',
                          attn_cfg=dict(SMALL, type='CBSA', rep_grid=(2, 2),
                                        out_proj='tied')),
    'mssa': dict(type='MSSAHead', mode='sa',
                 attn_cfg=dict(SMALL, type='MSSA')),
    'mssa-ca': dict(type='MSSAHead', mode='ca',
                    attn_cfg=dict(SMALL, type='MSSA'),
                    cross_attn_cfg=dict(head_dim=8)),
    'tssa': dict(type='TSSAHead', attn_cfg=dict(SMALL, type='TSSA')),
}


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('name', list(HEADS))
def test_heads_run_under_autocast(name, dtype):
    skip_without_cpu_autocast(dtype)
    torch.manual_seed(0)
    head = build_head(HEADS[name]).eval()
    feature = torch.randn(1, 48, 6, 9)
    with torch.no_grad():
        ref = head([feature])
        with torch.autocast('cpu', dtype=dtype):
            low = head([feature])
    assert torch.isfinite(low).all()
    # masks are LayerNorm-ed over the classes: values of order 1
    assert (low.float() - ref).abs().mean() < 0.05
    with torch.autocast('cpu', dtype=dtype):
        head.train()
        head([feature.requires_grad_()]).float().sum().backward()
    assert torch.isfinite(feature.grad).all()


def largest_intermediate(fn, *args) -> int:
    """The most elements of any tensor an op received while ``fn`` ran."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        out = fn(*args)
    sizes = [out.numel()]
    for event in p.events():
        for shape in event.input_shapes or []:
            if shape and all(isinstance(s, int) for s in shape):
                sizes.append(math.prod(shape))
    return max(sizes)


@pytest.mark.parametrize('name', ['cbsa', 'tssa'])
def test_linear_ops_never_form_token_by_token_tensors(name):
    """At N = 1200 tokens, no tensor comes near N x N (1.44M) elements,
    forward or backward: the largest is N x (K*p) or m x N per subspace."""
    torch.manual_seed(0)
    n, d = 1200, 32
    op = (CBSA(d, 2, 16, rep_grid=(4, 4)) if name == 'cbsa' else
          TSSA(d, 2, 16))
    x = torch.randn(1, n, d, requires_grad=True)

    def step(x):
        out = op(x, (30, 40)) if name == 'cbsa' else op(x)
        out.sum().backward()
        return out

    assert largest_intermediate(step, x) <= n * max(d, 2 * 16)
    # the probe does see token-by-token attention where it happens
    naive = largest_intermediate(
        lambda x: torch.softmax(x @ x.transpose(1, 2), -1) @ x, x)
    assert naive >= n * n


def test_loglog_slope_and_extrapolation():
    xs = [100, 400, 1600]
    assert loglog_slope(xs, [3 * x for x in xs]) == pytest.approx(1.0)
    assert loglog_slope(xs, [x**2 for x in xs]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        loglog_slope([5, 5], [1, 2])
    assert extrapolate_loglog([100, 200], [10, 40], 400) == pytest.approx(160)
    # never extrapolates below linear growth, needs two points
    assert extrapolate_loglog([100, 200], [10, 10], 400) == pytest.approx(20)
    assert extrapolate_loglog([100], [10], 400) is None


class FakeClock:
    """Seconds that pass only when a timed function says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def function(self, name: str, seconds: float, order: list):
        def fn():
            order.append(name)
            self.now += seconds
        return fn


def test_time_interleaved_rounds_and_budget():
    order, clock = [], FakeClock()
    fns = dict(slow=clock.function('slow', 0.02, order),
               fast=clock.function('fast', 0.0, order))
    times = time_interleaved(fns, torch.device('cpu'), repeats=6, warmup=1,
                             max_seconds=0.05, settle=False, clock=clock)
    assert times['fast'] == [0.0] * 6
    # stopped by its budget: 3 calls spend 0.06 >= 0.05
    assert times['slow'] == pytest.approx([0.02] * 3)
    # warm-up first, then one call of each per round
    assert order[:2] == ['slow', 'fast']
    assert order[2:8] == ['slow', 'fast'] * 3
    assert order[8:] == ['fast'] * 3
    # a first call longer than the whole budget is the only one timed
    times = time_interleaved(fns, torch.device('cpu'), repeats=4, warmup=0,
                             max_seconds=0.01, settle=False, clock=clock)
    assert len(times['slow']) == 1 and len(times['fast']) == 4


def test_every_size_is_timed_in_the_same_rounds():
    """Two models at two sizes: one round calls each model at each size,
    so a ratio between sizes compares calls timed side by side; a skipped
    model (no calls) keeps its row, untimed, and stays out of the history
    its larger sizes are predicted from."""
    order, history = [], {}
    bench = Benchmark(columns=[('head', 'head', '{}')], kinds=('fwd', ),
                      describe=lambda row: row['head'])

    def one(name, model, past):
        row = new_row(name, size_of[0])
        if name == 'c':
            return row, None
        return row, dict(fwd=lambda: order.append((name, row['size'])))

    def measure(size):
        size_of[0] = size
        return bench.measure_size(dict(a=0, b=0, c=0), one, history)

    size_of = [None]
    rows = bench.measure_sizes(
        [(4, 4), (2, 2)], measure,
        BenchmarkOptions(repeats=2, warmup=0, max_seconds=None),
        torch.device('cpu'))
    pairs = [('a', '2x2'), ('b', '2x2'), ('a', '4x4'), ('b', '4x4')]
    # each timed call follows an untimed one of the same pair
    assert order == [p for _ in range(2) for p in pairs for _ in range(2)]
    assert [(r['head'], r['size']) for r in rows] == [
        ('a', '2x2'), ('b', '2x2'), ('c', '2x2'),
        ('a', '4x4'), ('b', '4x4'), ('c', '4x4')]
    assert [r.get('fwd_calls') for r in rows] == [2, 2, None, 2, 2, None]
    assert {k: len(v) for k, v in history.items()} == dict(a=2, b=2, c=0)


def test_time_interleaved_settles_each_timed_call():
    order, clock = [], FakeClock()
    fns = dict(a=clock.function('a', 0.0, order),
               b=clock.function('b', 0.0, order))
    times = time_interleaved(fns, torch.device('cpu'), repeats=3, warmup=1,
                             clock=clock)
    assert [len(t) for t in times.values()] == [3, 3]
    # warm-up, then per round: untimed + timed call of a, then of b
    assert order == ['a', 'b'] + ['a', 'a', 'b', 'b'] * 3
    # a function slower than a second is not settled after its first call
    # (nor warmed up more than once)
    order.clear()
    slow = time_interleaved(dict(s=clock.function('s', 1.01, order)),
                            torch.device('cpu'), repeats=2, warmup=3,
                            clock=clock)
    assert slow['s'] == pytest.approx([1.01, 1.01])
    assert order == ['s'] * 4  # warm-up, settle + timed, timed


def test_a_frozen_heap_is_left_out_of_collections_until_the_block_ends():
    """Cyclic garbage made inside the block is still collected; objects
    alive before it are not scanned, and are collected again after it."""
    import gc
    import weakref

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    before = Node()
    before.self = before
    gone_before = weakref.ref(before)
    with memory.frozen_heap():
        assert gc.get_freeze_count() > 0
        del before  # garbage now, but frozen: not collected
        gc.collect()
        assert gone_before() is not None
        made_inside = cycle()
        gc.collect()
        assert made_inside() is None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone_before() is None


def test_peak_memory_is_the_rise_of_the_high_water_mark(monkeypatch):
    """On a CPU: the high-water mark after the call minus the resident
    set before it, with the mark reset in between (a stand-in /proc)."""
    status = dict(VmRSS=100 * 2**20, VmHWM=900 * 2**20)
    resets = []

    class ClearRefs:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, text):
            resets.append(text)
            status['VmHWM'] = status['VmRSS']  # what '5' does

    monkeypatch.setattr(memory, 'proc_bytes', status.get)
    monkeypatch.setattr(memory, 'open', ClearRefs, raising=False)

    def allocate():
        status['VmHWM'] = max(status['VmHWM'], 164 * 2**20)
        return 'done'

    peak, result = peak_memory(allocate, torch.device('cpu'))
    assert result == 'done' and peak == 64 * 2**20
    assert resets and set(resets) == {'5'}
    # without /proc (not Linux) there is no figure, but the call runs
    monkeypatch.setattr(memory, 'cpu_peak_supported', lambda: False)
    assert peak_memory(allocate, torch.device('cpu')) == (None, 'done')


def test_benchmark_tool_writes_table_plot_and_ratios(tmp_path):
    out = tmp_path / 'bench'
    # the smallest token grid CBSA's 10x10 representatives allow, and more
    proc = run_tool([BENCH, '--arch', 's', '--shapes', '160', '224',
                     '160x320', '--repeats', '2', '--warmup', '1',
                     '--models', 'segmenter', 'linear', 'cbsa',
                     'cbsa-straightforward', 'tssa', '--out', str(out)])
    assert 'slopes of cost vs tokens' in proc.stdout
    assert 'forward latency / straightforward CBSA' in proc.stdout
    for name in ('benchmark.json', 'benchmark.md', 'benchmark.png'):
        assert osp.getsize(out / name) > 0
    report = json.loads((out / 'benchmark.json').read_text())
    rows = {(r['head'], r['size']): r for r in report['results']}
    assert len(rows) == 15
    seg, cbsa = rows[('segmenter', '160x320')], rows[('cbsa', '160x320')]
    assert cbsa['grid'] == [10, 20] and cbsa['tokens'] == 200
    for key in ('flops', 'params', 'fwd_ms', 'train_ms'):
        assert cbsa[key] > 0
        assert cbsa[f'{key}_vs_segmenter'] == pytest.approx(cbsa[key] /
                                                            seg[key])
    assert rows[('linear', '160x160')].get('flops_vs_segmenter', 0) < 0.05
    straight = rows[('cbsa-straightforward', '224x224')]
    row = rows[('cbsa', '224x224')]  # same function, same parameters
    assert row['max_abs_diff_vs_straightforward'] < 1e-5
    assert row['params'] == straight['params']
    assert row['fwd_ms_vs_straightforward'] == pytest.approx(
        row['fwd_ms'] / straight['fwd_ms'])
    # FLOPs grow linearly with tokens for CBSA, faster for Segmenter
    assert report['slopes']['cbsa']['flops'] < 1.05
    assert report['slopes']['segmenter']['flops'] > \
        report['slopes']['cbsa']['flops']
    assert 'targets' not in report  # targets: docs/notes/


def test_benchmark_tool_rejects_bad_sizes_and_missing_configs(tmp_path):
    proc = run_tool([BENCH, '--shapes', '8x'], check=False)
    assert proc.returncode == 2 and 'give H (square) or HxW' in proc.stderr
    proc = run_tool([BENCH, '--arch', 't', '--models', 'linear',
                     '--shapes', '64', '--out', str(tmp_path / 'x')],
                    check=False)
    assert proc.returncode == 2
    assert "error: no config for head 'linear' with ViT-t" in proc.stderr
    assert not (tmp_path / 'x').exists()


def test_config_lookup_names_what_is_missing_and_what_to_do():
    from mmseg_whitebox.analysis.decoder_benchmark import BENCHMARK as heads
    from mmseg_whitebox.analysis.encoder_benchmark import \
        BENCHMARK as encoders
    head_config, encoder_config = heads.config, encoders.config
    root = osp.join(REPO, 'configs')
    assert head_config('cbsa', 's', root).endswith(
        'cbsa_vit-s_8xb1-160k_ade20k-512x512.py')
    assert osp.basename(encoder_config('cbt', 's', root)).startswith(
        'cbsa_cbt-s_')
    with pytest.raises(InputError,
                       match="no config for encoder 'cbt' of size 'xl' "
                       r'\(cbsa/cbsa_cbt-xl_\*.*choose another size'):
        encoder_config('cbt', 'xl', root)
    with pytest.raises(InputError, match="head 'cbsa' with ViT-xl.*"
                       'leave this head out'):
        head_config('cbsa', 'xl', root)


ENCODER_BENCH = 'tools/analysis_tools/benchmark_encoders.py'


def test_encoder_benchmark_writes_table_and_ratios(tmp_path):
    out = tmp_path / 'bench'
    proc = run_tool([ENCODER_BENCH, '--arch', 't', '--models', 'vit',
                     'cbt', 'cbsa-vit', 'mita', '--shapes', '256', '256x384',
                     '--flops-shapes', '256', '--repeats', '1', '--warmup',
                     '0', '--out', str(out)])
    assert 'encoder forward / ViT' in proc.stdout
    for name in ('benchmark.json', 'benchmark.md', 'benchmark.png'):
        assert osp.getsize(out / name) > 0
    report = json.loads((out / 'benchmark.json').read_text())
    rows = {(r['head'], r['size']): r for r in report['results']}
    assert len(rows) == 8
    vit, cbt = rows[('vit', '256x256')], rows[('cbt', '256x256')]
    for key in ('enc_flops', 'seg_flops', 'enc_fwd_ms', 'seg_fwd_ms',
                'enc_train_ms', 'enc_mem_fwd'):
        assert cbt[key] > 0
        assert cbt[f'{key}_vs_vit'] == pytest.approx(cbt[key] / vit[key])
    assert cbt['seg_flops'] > cbt['enc_flops']
    assert 'enc_flops' not in rows[('cbt', '256x384')]  # --flops-shapes
    # the CBSA-adapted ViT has the ViT's parameters (both with the
    # patch-embedding bias, as released) and two step sizes per head and
    # layer
    assert rows[('cbsa-vit', '256x256')]['enc_params'] == (
        vit['enc_params'] + 12 * 2 * 3)
    # MiTA adds no parameter to the ViT's
    assert rows[('mita', '256x256')]['enc_params'] == vit['enc_params']
    assert 'enc_fwd_ms' in report['slopes']['cbt']


SHARED_BENCH = 'tools/analysis_tools/benchmark_shared_encoder.py'


def test_shared_encoder_benchmark_prints_ratio_and_checks_results():
    config = dict(DEMO_MODELS)['cbsa']
    proc = run_tool([SHARED_BENCH, config, '--num-images', '1',
                     '--shape', '128', '160', '--settings', '3',
                     '--max-heads', '2', '--threads', '1'])
    out = proc.stdout
    assert '3 settings of' in out and '2 pass(es)' in out
    ratio = float(out.split('ratio shared / sequential: ')[1].split()[0])
    assert ratio > 0
    assert 'identical metrics in every setting: yes' in out


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA device exists')
def test_shared_encoder_benchmark_refuses_a_missing_device():
    proc = run_tool([SHARED_BENCH, '--device', 'cuda', '--num-images', '1'],
                    check=False)
    assert proc.returncode == 2
    assert 'this machine has no CUDA device' in proc.stderr


TRAIN_BENCH = 'tools/analysis_tools/benchmark_train_step.py'


def test_train_step_benchmark_writes_table_ratios_and_skips(tmp_path):
    out = tmp_path / 'bench'
    # ViT-T + Segmenter with mmseg's loss and with the banded loss (bands
    # of 32 rows); 0.1 MB: the third size is predicted (from the first
    # two) to need more, so it is skipped rather than run
    proc = run_tool([TRAIN_BENCH, '--arch', 't', '--models', 'vit+segmenter',
                     '--banded-loss', '32', '--shapes', '160', '192', '224',
                     '--repeats', '1', '--warmup', '0', '--threads', '1',
                     '--memory-limit-gb', '0.0001', '--out', str(out)])
    assert 'training step / vit+segmenter' in proc.stdout
    assert 'banded loss 32 rows' in proc.stdout
    report = json.loads((out / 'benchmark.json').read_text())
    rows = {(r['head'], r['size']): r for r in report['results']}
    assert len(rows) == 6 and report['batch'] == 2
    assert report['banded_loss'] == 32
    banded = 'vit+segmenter banded'
    ref, other = rows[('vit+segmenter', '192x192')], rows[(banded,
                                                           '192x192')]
    assert other['tokens'] == 2 * 12 * 12
    for key in ('step_ms', 'mem_step'):
        if memory.cpu_peak_supported() or key == 'step_ms':
            assert other[key] > 0
            assert other[f'{key}_vs_ref'] == pytest.approx(other[key] /
                                                           ref[key])
    # at the first size, the same weights, batch and seeded dropout: the
    # same first loss, to float32 summation order (1e-5 relative; later
    # sizes follow steps with different dropout)
    first = [rows[(head, '160x160')]['loss'] for head in ('vit+segmenter',
                                                         banded)]
    assert math.isfinite(first[0])
    assert first[1] == pytest.approx(first[0], rel=1e-5)
    for head in ('vit+segmenter', banded):
        assert rows[(head, '224x224')]['status'].startswith(
            'skipped: predicted to need')
        assert 'step_ms' not in rows[(head, '224x224')]
    assert (out / 'benchmark.md').read_text().count('\n') == 8


def test_a_benchmarked_training_step_is_one_optimizer_step():
    from mmseg_whitebox.analysis.train_step_benchmark import (
        build_trainable, random_batch, train_step_fn)
    cpu = torch.device('cpu')
    built = build_trainable(['vit+cbsa'], 't', cpu, 0,
                            osp.join(REPO, 'configs'), with_cp=True,
                            loss_band_rows=16)
    assert list(built) == ['vit+cbsa', 'vit+cbsa banded']
    (model, optim_wrapper), (banded, banded_wrapper) = built.values()
    assert model.backbone.with_cp and banded.backbone.with_cp
    assert type(model).__name__ == 'EncoderDecoder'
    assert type(banded).__name__ == 'BandedLossEncoderDecoder'
    assert banded.loss_band_rows == 16
    # the config's optimizer: the released Nesterov SGD
    sgd = optim_wrapper.optimizer
    assert type(sgd).__name__ == 'SGD' and sgd.defaults['nesterov']
    inputs, samples = random_batch(model, 2, (160, 160), cpu, 0)
    assert [s.gt_sem_seg.data.shape for s in samples] == [(1, 160, 160)] * 2
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = []
    for m, wrapper in ((model, optim_wrapper), (banded, banded_wrapper)):
        torch.manual_seed(0)
        losses.append(train_step_fn(m, wrapper, inputs, samples, cpu,
                                    None)())
    assert math.isfinite(losses[0]) and not model.training
    # same weights, same batch, same dropout: same loss (float32, 1e-5)
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    moved = {n for n, p in model.named_parameters()
             if not torch.equal(p, before[n])}
    assert any(n.startswith('backbone.') for n in moved)
    assert any(n.startswith('decode_head.') for n in moved)
    assert all(p.grad is None for p in model.parameters())
    # the banded model took the same step (float32 summation order)
    for (name, p), q in zip(model.named_parameters(), banded.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=name)


def test_train_step_benchmark_times_compiled_models_beside_eager(
        tmp_path, eager_compile):
    """``compile``: every model also as ``+compile``, a copy with the same
    weights whose loss is compiled (as ``compile=True`` trains), timed in
    the same rounds, its compilation timed apart and its figures as ratios
    to itself eager. Dynamo's ``eager`` backend stands in for inductor here
    (the same graphs captured, no code generated: inductor's run is
    tests/test_compile.py's), so its first loss is eager's, same dropout
    included."""
    from mmseg_whitebox.analysis.train_step_benchmark import \
        run_train_step_benchmark
    out = tmp_path / 'bench'
    report = run_train_step_benchmark(
        str(out), ['vit+segmenter'], [(32, 32)], 't', batch=1,
        options=BenchmarkOptions(repeats=1, warmup=0, max_seconds=None,
                                 compile=True), threads=1)
    assert report['compile'] is True
    rows = {(r['head'], r['size']): r for r in report['results']}
    assert sorted(rows) == [('vit+segmenter', '32x32'),
                            ('vit+segmenter+compile', '32x32')]
    eager = rows[('vit+segmenter', '32x32')]
    compiled = rows[('vit+segmenter+compile', '32x32')]
    assert compiled['params'] == eager['params']
    assert compiled['step_compile_s'] > 0
    assert 'step_compile_s' not in eager
    assert compiled['loss'] == pytest.approx(eager['loss'], rel=1e-5)
    assert compiled['step_ms_vs_eager'] == pytest.approx(
        compiled['step_ms'] / eager['step_ms'])
    assert 'x eager' in (out / 'benchmark.md').read_text()


def test_decoder_benchmark_times_compiled_heads_beside_eager(tmp_path):
    """``--compile``: every head also compiled, the same parameters, timed
    in the same rounds; its compilation time and its ratios to itself
    eager (inductor: one forward graph)."""
    out = tmp_path / 'bench'
    proc = run_tool([BENCH, '--arch', 't', '--shapes', '64', '--models',
                     'segmenter', '--compile', '--no-backward',
                     '--no-flops', '--repeats', '1', '--warmup', '0',
                     '--out', str(out)])
    assert 'compiled / eager (same head, same size):' in proc.stdout
    report = json.loads((out / 'benchmark.json').read_text())
    assert report['compile'] is True
    rows = {r['head']: r for r in report['results']}
    assert set(rows) == {'segmenter', 'segmenter+compile'}
    eager, compiled = rows['segmenter'], rows['segmenter+compile']
    assert compiled['params'] == eager['params']
    assert compiled['fwd_compile_s'] > 0 and 'fwd_compile_s' not in eager
    assert compiled['fwd_ms_vs_eager'] == pytest.approx(
        compiled['fwd_ms'] / eager['fwd_ms'])
    assert 'x eager' in (out / 'benchmark.md').read_text()
