"""Summary metrics, parameter groups and subspace diagnostics of the noise
evaluator: known answers on hand-made results, the groups of every demo
head, and one short run of the tools."""
import csv
import json
import math

import pytest
import torch

from mmseg_whitebox.models.attention_registry import WHITE_BOX_ROLES
from mmseg_whitebox.robustness import (GROUPS, NoiseSweep,
                                       NoiseSweepOptions, ResultStore,
                                       compare_sweeps, group_selections,
                                       mean_ci, normalized_auc,
                                       parameter_groups, principal_angles,
                                       select_parameters, sigma_at_fraction,
                                       subspace_change, summarize_results)
from mmseg_whitebox.robustness.groups import (NON_ATTENTION, OTHER,
                                              group_of, parameter_role)
from mmseg_whitebox.robustness.summary import (BELOW_RANGE, NOT_REACHED,
                                               markdown_table, summary_rows)

from _helpers import demo_configs, run_tool, small_run_options
from test_robustness import build_model, snapshot

T_975_DF2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 dof


# -- summary metrics -------------------------------------------------------
def test_mean_ci_is_the_t_interval():
    mean, half = mean_ci([1.0, 2.0, 3.0])  # s = 1
    assert mean == 2.0
    assert half == pytest.approx(T_975_DF2 / math.sqrt(3))
    assert mean_ci([5.0]) == (5.0, None)
    assert mean_ci([4.0, 4.0])[1] == 0.0
    with pytest.raises(ValueError):
        mean_ci([])


def test_normalized_auc_known_answers():
    sigmas = [0.01, 0.1, 1.0]
    # trapezoids over log10 sigma: 1 * 80 + 1 * 60, over 2 decades x 80
    assert normalized_auc(sigmas, [80, 80, 40], 80) == pytest.approx(0.875)
    assert normalized_auc(sigmas, [80, 80, 80], 80) == pytest.approx(1.0)
    assert normalized_auc(sigmas, [0, 0, 0], 80) == 0.0
    # order and sigma 0 do not matter; a single sigma gives no area
    assert normalized_auc([1.0, 0.0, 0.1, 0.01], [40, 99, 80, 80],
                          80) == pytest.approx(0.875)
    assert normalized_auc([0.1], [50], 80) is None


def test_sigma_50_known_answers():
    sigmas = [0.01, 0.1, 1.0]
    # level 40 halfway between 0.1 (60) and 1 (20) in log10: 10^-0.5
    assert sigma_at_fraction(sigmas, [80, 60, 20], 80) == pytest.approx(
        10**-0.5)
    assert sigma_at_fraction(sigmas, [80, 40, 20], 80) == pytest.approx(0.1)
    assert sigma_at_fraction(sigmas, [80, 70, 50], 80) == NOT_REACHED
    assert sigma_at_fraction(sigmas, [30, 20, 10], 80) == BELOW_RANGE
    # the first crossing counts, not a later recovery
    assert sigma_at_fraction([0.01, 0.1, 1.0, 10.0], [80, 20, 70, 10],
                             80) == pytest.approx(10**(-2 + 2 / 3))
    assert sigma_at_fraction([], [], 80) is None


def point(selection, sigma, values):
    """A results.json point as sweeps saved it (draws with seeds)."""
    return dict(selection=selection, sigma=sigma, mode='absolute',
                draws=[dict(seed=i, mIoU=v) for i, v in enumerate(values)],
                mIoU_mean=sum(values) / len(values))


def hand_made(removed=40.0, name='model'):
    """An older results.json: no summary, no selections in the setup."""
    return dict(
        setup=dict(mode='absolute', name=name,
                   num_parameters={'decoder-attention': 1000}),
        clean=dict(mIoU=80.0),
        ablation={'decoder-attention': dict(metrics=dict(mIoU=removed))},
        attention_usage=[], partial={},
        points=[point('decoder-attention', 0.0, [80.0]),
                point('decoder-attention', 0.01, [80.0, 80.0]),
                point('decoder-attention', 0.1, [70.0, 74.0]),
                point('decoder-attention', 1.0, [20.0, 24.0])])


def test_summarize_results_from_stored_draws():
    s = summarize_results(hand_made())['decoder-attention']
    assert s['clean'] == 80 and s['removed'] == 40
    assert s['attention_unused'] is False
    by_sigma = {p['sigma']: p for p in s['points']}
    p = by_sigma[0.1]
    assert p['mean'] == 72.0 and p['draws'] == 2
    # s = 2*sqrt(2), n = 2: t_{0.975,1} * 2 = 12.706... * 2
    assert p['ci95'] == pytest.approx(12.706204736174707 * 2)
    assert p['ci95_low'] == pytest.approx(72 - p['ci95'])
    assert p['retention'] == pytest.approx(0.9)
    assert p['attention_retention'] == pytest.approx((72 - 40) / 40)
    assert by_sigma[0.0]['ci95'] is None  # one draw
    # curve 80, 72, 22 over -2, -1, 0: (76 + 47) / (2 * 80)
    assert s['auc'] == pytest.approx((76 + 47) / 160)
    # half of clean (40) between 0.1 (72) and 1 (22)
    assert s['sigma_50'] == pytest.approx(10**(-1 + 32 / 50))
    # per-seed curves: seed 0 (80, 70, 20), seed 1 (80, 74, 24)
    aucs = [(75 + 45) / 160, (77 + 49) / 160]
    assert s['auc_seeds'] == 2
    assert s['auc_ci95'] == pytest.approx(mean_ci(aucs)[1])
    assert s['sigma_min'] == 0.01 and s['sigma_max'] == 1.0
    # restricted to some sigmas
    r = summarize_results(hand_made(), sigmas=[0.01, 0.1])
    assert r['decoder-attention']['auc'] == pytest.approx(76 / 80)
    assert r['decoder-attention']['sigma_50'] == NOT_REACHED


def test_attention_retention_undefined_where_unused():
    s = summarize_results(hand_made(removed=79.5))['decoder-attention']
    assert s['attention_unused'] is True
    assert all(p['attention_retention'] is None for p in s['points'])
    assert all(p['retention'] is not None for p in s['points'])
    data = hand_made()
    data['ablation'] = {}
    s = summarize_results(data)['decoder-attention']
    assert s['attention_unused'] is None and s['removed'] is None
    table = markdown_table(summary_rows(
        summarize_results(hand_made(removed=79.5)), [0.1], 'm'), [0.1])
    assert '79.50 (unused)' in table and '(0.90 / -)' in table
    assert summarize_results(dict(points=[])) == {}


def test_store_writes_summary_and_old_results_load(tmp_path):
    data = hand_made()
    with open(tmp_path / 'results.json', 'w') as f:
        json.dump(data, f)
    store = ResultStore(str(tmp_path), dict(mode='absolute'), resume=True)
    store.save()
    with open(tmp_path / 'results.json') as f:
        saved = json.load(f)
    assert saved['summary']['decoder-attention']['auc'] == pytest.approx(
        (76 + 47) / 160)
    with open(tmp_path / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert rows[0]['selection'] == 'decoder-attention'
    assert rows[0]['parameters'] == '1000'
    with open(tmp_path / 'results.csv') as f:
        rows = {r['sigma']: r for r in csv.DictReader(f)
                if r['kind'] == 'noise'}
    assert float(rows['0.1']['retention']) == pytest.approx(0.9)
    assert float(rows['0.1']['attention_retention']) == pytest.approx(0.8)


def test_compare_sweeps_table_csv_plot(tmp_path):
    a, b = tmp_path / 'a', tmp_path / 'b'
    for folder, data in ((a, hand_made(name='A')),
                         (b, hand_made(removed=79.5, name='B'))):
        folder.mkdir()
        if folder == b:  # one extra sigma: AUC over the common ones
            data['points'].append(point('decoder-attention', 3.0, [0, 0]))
        with open(folder / 'results.json', 'w') as f:
            json.dump(data, f)
    out = compare_sweeps([str(a), str(b)], str(tmp_path / 'cmp'))
    for key in ('md', 'csv', 'png'):
        assert (tmp_path / 'cmp' / f'comparison.{key}').is_file()
    with open(out['csv']) as f:
        rows = list(csv.DictReader(f))
    assert [r['model'] for r in rows] == ['A', 'B']
    assert float(rows[1]['auc']) == pytest.approx((76 + 47) / 160)
    assert rows[1]['attention_retention@0.1'] == ''
    assert 'common to all sweeps' in out['markdown']
    assert '| A | decoder-attention | 1,000 | 80.00 | 40.00 |' in \
        out['markdown']
    with pytest.raises(ValueError, match='not in every sweep'):
        compare_sweeps([str(a), str(b)], str(tmp_path / 'x'), sigmas=[3.0])
    with pytest.raises(ValueError, match='one label per folder'):
        compare_sweeps([str(a)], str(tmp_path / 'x'), labels=['a', 'b'])


# -- parameter groups --------------------------------------------------------
def expected_groups(model):
    """The groups a head's attention layers must have, read off the
    modules (not the parameter names the grouping reads)."""
    from mmcv.cnn.bricks.transformer import MultiheadAttention

    from mmseg_whitebox.ops.subspace import SubspaceAttention
    ops = [m for m in model.decode_head.modules()
           if isinstance(m, (MultiheadAttention, SubspaceAttention))]
    if isinstance(ops[0], MultiheadAttention):
        return ['qkv', 'out-proj', 'biases']
    return ['bases', 'step-sizes'] + (
        ['out-proj', 'biases'] if ops[0].out_proj is not None else [])


@pytest.mark.parametrize('name', list(demo_configs()))
def test_groups_partition_the_attention_parameters(name):
    model = build_model(name)
    sel = select_parameters(model, 'decoder-attention')
    groups = parameter_groups(sel)
    assert list(groups) == expected_groups(model)
    names = [n for members in groups.values() for n, _ in members]
    assert len(names) == len(set(names))  # nothing counted twice
    assert set(names) == {n for n, _ in sel.parameters}  # nothing missing
    for group, members in groups.items():
        for n, _ in members:
            leaf = n.rsplit('.attn.', 1)[1]
            if group == 'bases':
                assert leaf == 'proj.weight'
            elif group == 'biases':
                assert leaf.endswith('bias')
            elif group == 'out-proj':
                assert leaf.endswith('out_proj.weight')
            elif group == 'qkv':
                assert leaf == 'in_proj_weight'
    subs = group_selections(sel)
    assert [s.label for s in subs] == [
        f'decoder-attention:{g}' for g in groups]
    assert all(s.sites == sel.sites for s in subs)
    # the encoders' attention (mmseg ViT or white-box) has known roles too
    enc = parameter_groups(select_parameters(model, 'encoder-attention'))
    assert OTHER not in enc and NON_ATTENTION not in enc


def test_groups_of_other_targets_and_errors():
    model = build_model('cbsa')
    decoder = select_parameters(model, 'decoder')
    groups = parameter_groups(decoder)
    assert NON_ATTENTION in groups and OTHER not in groups
    assert any('norm' in n for n, _ in groups[NON_ATTENTION])
    assert 'bases' in parameter_groups(select_parameters(
        build_model('cbt'), 'encoder-attention'))
    rigorous = select_parameters(build_model('cbsa-rigorous'),
                                 'decoder-attention')
    with pytest.raises(ValueError, match='out-proj.*it has: bases'):
        group_selections(rigorous, ['out-proj'])
    # q/k/v operators in white-box blocks (MHSA, QKVCBSA)
    assert [parameter_role(WHITE_BOX_ROLES, n) for n in (
        'qkv.weight', 'qkv.bias', 'out_proj.weight', 'eta', 'x.scale')] == [
            'qkv', 'biases', 'out-proj', 'step-sizes', OTHER]
    assert set(GROUPS) >= {'bases', 'qkv', 'step-sizes', 'out-proj',
                           'biases'}


def test_group_labels_are_told_from_whole_selections():
    rigorous = select_parameters(build_model('cbsa-rigorous'),
                                 'decoder-attention')
    (bases, ) = group_selections(rigorous, ['bases'])
    assert group_of(bases.label) == 'bases'
    for whole in ('decoder-attention', 'decoder-attention[0,2]',
                  r'decode_head\.(?:layers)\.0\.', 'head:weights'):
        assert group_of(whole) is None, whole


def test_group_sweep_shares_one_ablation(tmp_path):
    model = build_model('cbsa')
    sel = select_parameters(model, 'decoder-attention')
    selections = [sel] + group_selections(sel)
    calls = []

    def evaluate():
        calls.append(1)
        return dict(mIoU=50.0 - len(calls), aAcc=1.0, mAcc=1.0)

    store = ResultStore(str(tmp_path), dict(mode='absolute'))
    sweep = NoiseSweep(model, evaluate, selections,
                       NoiseSweepOptions(sigmas=[0.1], draws=1), store=store)
    assert sweep.num_evaluations == 1 + 1 + 5
    data = sweep.run()
    assert len(calls) == 7
    assert set(data['ablation']) == {s.label for s in selections}
    assert len({json.dumps(a, sort_keys=True)
                for a in data['ablation'].values()}) == 1
    assert set(data['summary']) == {s.label for s in selections}


# -- principal angles and update change ---------------------------------------
def test_principal_angles_known_cases():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(10, 3, generator=g, dtype=torch.float64)
    mix = torch.randn(3, 3, generator=g, dtype=torch.float64)
    # the same span, other basis: all angles 0
    assert principal_angles(a, a @ mix).abs().max() < 1e-6
    e = torch.eye(6, dtype=torch.float64)
    # orthogonal spans: 90 degrees
    torch.testing.assert_close(principal_angles(e[:, :2], e[:, 2:4]),
                               torch.full((2, ), 90.0, dtype=torch.float64))
    # one direction rotated by theta towards a new axis: angles 0, theta
    for theta in (0.3, 1.2, 1e-6):
        b = torch.stack([e[:, 0], math.cos(theta) * e[:, 1] +
                         math.sin(theta) * e[:, 2]], 1)
        angles = principal_angles(e[:, :2], b)
        assert angles[0] < 1e-9
        assert angles[1] == pytest.approx(math.degrees(theta), rel=1e-9)
    # a rotation of the whole space maps a span to one at known angles
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g,
                                       dtype=torch.float64))
    assert principal_angles(q[:, :3], q[:, :3] @ mix[:, :3]).max() < 1e-6
    with pytest.raises(ValueError, match='same d'):
        principal_angles(torch.zeros(4, 2), torch.zeros(5, 2))


def test_subspace_change_on_a_demo_head():
    model = build_model('cbsa')
    before = snapshot(model)
    sel = select_parameters(model, 'decoder-attention')
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(1))

    def forward(batch):
        return model(batch, mode='tensor')

    rows = subspace_change(model, sel, [0.0, 1e-3, 0.1], [x], num_seeds=2,
                           forward=forward)
    assert snapshot(model) == before
    assert [(r['layer'], r['sigma']) for r in rows] == [
        (i, s) for s in (1e-3, 0.1) for i in range(3)]
    small, large = rows[:3], rows[3:]
    for r0, r1 in zip(small, large):
        assert 0 < r0['angle_mean_deg'] <= r0['angle_max_deg'] < 90
        assert r0['angle_mean_deg'] < r1['angle_mean_deg']
        assert r0['update_change_isolated'] < r1['update_change_isolated']
    # the first layer's input is not perturbed: isolated = propagated
    for r in (small[0], large[0]):
        assert r['update_change_isolated'] == pytest.approx(
            r['update_change_propagated'], rel=1e-9)
    # noise on the step sizes alone leaves the subspaces where they were
    steps = group_selections(sel, ['step-sizes'])[0]
    rows = subspace_change(model, steps, [0.1], [x], 1, forward=forward)
    assert all(r['angle_max_deg'] < 1e-9 for r in rows)
    assert all(r['update_change_isolated'] > 0 for r in rows)
    with pytest.raises(ValueError, match='no subspace attention'):
        subspace_change(build_model('segmenter'), select_parameters(
            build_model('segmenter'), 'decoder-attention'), [0.1], [x])


# -- the tools, end to end ----------------------------------------------------
@pytest.mark.slow
def test_cli_groups_angles_and_comparison(tiny_ade, tiny_checkpoint,
                                          tmp_path):
    config = demo_configs()['cbsa']
    ckpt = tiny_checkpoint(config)
    opts = ['--cfg-options'] + small_run_options(tiny_ade, 4)
    out = tmp_path / 'sweep'
    cmd = ['tools/noise_robustness.py', config, ckpt, '--sigmas', '0.01',
           '0.1', '--draws', '2', '--groups', '--subspace-angles',
           '--angle-images', '2', '--out', str(out), '--work-dir',
           str(tmp_path / 'w')]
    proc = run_tool(cmd + opts)
    assert 'decoder-attention:bases' in proc.stdout
    assert 'AUC' in proc.stdout and 'principal angles' in proc.stdout
    with open(out / 'results.json') as f:
        data = json.load(f)
    labels = ['decoder-attention'] + [
        f'decoder-attention:{g}'
        for g in ('bases', 'step-sizes', 'out-proj', 'biases')]
    assert list(data['summary']) == labels
    assert {p['selection'] for p in data['points']} == set(labels)
    angles = data['subspace_angles']
    assert [(r['layer'], r['sigma']) for r in angles] == [
        (i, s) for s in (0.01, 0.1) for i in range(3)]
    for name in ('summary.csv', 'subspace_angles.csv', 'robustness.png'):
        assert (out / name).is_file(), name
    # resume: nothing left to evaluate or measure
    again = run_tool(cmd + ['--resume'] + opts)
    assert 'subspace angles:' not in again.stdout
    with open(out / 'results.json') as f:
        assert len(json.load(f)['subspace_angles']) == len(angles)
    # --subspace-angles without subspace layers is refused up front
    refused = run_tool(cmd[:3] + ['--target', r'backbone\.layers\.0\.attn\.',
                                  '--subspace-angles', '--out',
                                  str(tmp_path / 's')] + opts, check=False)
    assert refused.returncode == 2
    assert 'needs subspace attention layers' in refused.stderr
    cmp = run_tool(['tools/analysis_tools/compare_robustness.py', str(out),
                    str(out), '--labels', 'one', 'two', '--out',
                    str(tmp_path / 'cmp')])
    assert '| one | decoder-attention:bases |' in cmp.stdout
    for key in ('md', 'csv', 'png'):
        assert (tmp_path / 'cmp' / f'comparison.{key}').is_file()
    bad = run_tool(['tools/analysis_tools/compare_robustness.py',
                    str(tmp_path / 'nothing'), '--out',
                    str(tmp_path / 'c2')], check=False)
    assert bad.returncode == 2 and 'results.json' in bad.stderr
