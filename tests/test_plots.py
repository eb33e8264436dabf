"""Figures a user reads at a glance: the robustness and corruption plots
keep their mIoU axis within [0, 100] and say in the legend what their
spread is and over how many draws; an overlay names its model and sigma
and lists the classes present, in the palette's colours. Everything is
read back from the matplotlib Figure the package builds."""
import types

import numpy as np

from mmseg_whitebox.robustness.corruptions.report import corruption_figure
from mmseg_whitebox.robustness.plotting import (MIN_DRAWS_FOR_T_INTERVAL,
                                                plot_robustness,
                                                robustness_figure)
from mmseg_whitebox.robustness.summary import summarize_results

SIGMAS = (0.01, 0.1, 1.0)


def sweep_results(draws_per_sigma, selections=('decoder-attention',),
                  clean=90.0, removed=10.0):
    """A ``results.json`` whose draw ``i`` at sigma ``j`` has mIoU
    ``draws_per_sigma[j][i]``, the same for each selection."""
    points = [dict(selection=selection, sigma=sigma,
                   draws=[dict(seed=i, mIoU=v) for i, v in enumerate(vals)],
                   mIoU_mean=sum(vals) / len(vals))
              for selection in selections
              for sigma, vals in zip(SIGMAS, draws_per_sigma)]
    return dict(setup=dict(name='m', mode='absolute',
                           selections=list(selections)),
                clean=dict(mIoU=clean),
                ablation={s: dict(metrics=dict(mIoU=removed), sites=['a'])
                          for s in selections},
                points=points)


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def error_bar_ends(ax):
    """(bottom, top) of each error bar drawn, in drawing order."""
    ends = []
    for container in ax.containers:
        for bars in container.lines[2]:
            ends += [(min(s[0][1], s[1][1]), max(s[0][1], s[1][1]))
                     for s in bars.get_segments()]
    return ends


def test_two_draws_show_a_min_max_band_not_a_t_interval_past_100():
    # 99 and 61: the 95% t-interval (t = 12.7 for one dof) spans
    # about -162 to 321, far past the mIoU range
    draws = [[99.0, 61.0], [50.0, 20.0], [2.0, 0.0]]
    results = sweep_results(draws)
    point = summarize_results(results)['decoder-attention']['points'][0]
    assert point['ci95_high'] > 100 and point['ci95_low'] < 0
    ax = robustness_figure([('m', results)]).axes[0]
    assert ax.get_ylim() == (0.0, 100.0)
    assert error_bar_ends(ax) == []  # no t-interval bars
    curve = next(t for t in legend_texts(ax) if 'noise' in t)
    assert 'band: min-max over 2 draws' in curve
    assert f'no t-interval below {MIN_DRAWS_FOR_T_INTERVAL} draws' in curve
    band = ax.collections[-1].get_paths()[0].vertices
    assert band[:, 1].min() == 0.0 and band[:, 1].max() == 99.0


def test_enough_draws_show_the_t_interval_clipped_to_the_range():
    draws = [[99.0, 97.0, 100.0, 92.0, 99.5, 98.0],
             [50.0, 45.0, 60.0, 40.0, 55.0, 52.0],
             [1.0, 0.0, 3.0, 0.5, 0.0, 2.0]]
    results = sweep_results(draws)
    points = summarize_results(results)['decoder-attention']['points']
    assert points[0]['ci95_high'] > 100 and points[2]['ci95_low'] < 0
    ax = robustness_figure([('m', results)]).axes[0]
    assert ax.get_ylim() == (0.0, 100.0)
    expected = [(max(0.0, p['ci95_low']), min(100.0, p['ci95_high']))
                for p in points]
    assert np.allclose(error_bar_ends(ax), expected)
    curve = next(t for t in legend_texts(ax) if 'noise' in t)
    assert 'bars: 95% t-interval over 6 draws, band: min-max' in curve


def test_groups_with_few_draws_show_min_max_bars_and_one_draw_no_spread():
    draws = [[80.0, 70.0, 75.0], [40.0, 20.0, 30.0], [5.0, 1.0, 2.0]]
    results = sweep_results(
        draws, selections=('decoder-attention', 'decoder-attention:bases'))
    ax = robustness_figure([('m', results)]).axes[0]
    # the whole selection has a band; its group min-max bars
    assert error_bar_ends(ax) == [(70.0, 80.0), (20.0, 40.0), (1.0, 5.0)]
    texts = [t for t in legend_texts(ax) if 'noise' in t]
    assert 'band: min-max over 3 draws' in texts[0]
    assert 'bars: min-max over 3 draws' in texts[1]

    single = robustness_figure([('m', sweep_results([[80.0], [40.0],
                                                     [5.0]]))]).axes[0]
    assert any('1 draw: no spread' in t for t in legend_texts(single))
    assert error_bar_ends(single) == [] and single.get_ylim() == (0, 100)


def test_plot_robustness_still_writes_the_png(tmp_path):
    out = str(tmp_path / 'robustness.png')
    results = sweep_results([[99.0, 61.0], [50.0, 20.0], [2.0, 0.0]])
    assert plot_robustness([('m', results)], out) == out
    with open(out, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_corruption_axis_is_the_percentage_range():
    summary = dict(per_corruption={'gaussian_noise': 0}, mPC=60.0,
                   clean=99.5, rPC=0.6, per_severity={1: 99.0, 2: 21.0})
    values = {'gaussian_noise': {1: 99.0, 2: 21.0}}
    ax = corruption_figure(summary, values, [1, 2]).axes[0]
    assert ax.get_ylim() == (0.0, 100.0)


# -- overlays --------------------------------------------------------------
CLASSES = ('wall', 'floor', 'tree', 'sky', 'road')
PALETTE = ((120, 120, 120), (80, 50, 50), (4, 200, 3), (6, 230, 230),
           (140, 140, 140))


def test_overlay_names_model_and_sigma_and_lists_the_classes_present():
    from mmseg_whitebox.visualization.overlay import overlay_figure
    image = np.full((8, 12, 3), 100, dtype=np.uint8)
    prediction = np.zeros((8, 12), dtype=np.int64) + 3
    prediction[:, :4] = 1
    prediction[0, 0] = 255  # ignored: no legend entry, no colour
    fig = overlay_figure(image, prediction, CLASSES, PALETTE,
                         model_name='cbsa_vit-demo', sigma=0.1,
                         opacity=0.5)
    title = fig.get_suptitle()
    assert 'cbsa_vit-demo' in title and 'sigma 0.1' in title
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ['floor', 'sky']
    colours = [h.get_facecolor()[:3] for h in legend.legend_handles]
    assert np.allclose(colours, np.array([PALETTE[1], PALETTE[3]]) / 255)
    # painted with the same colours: image and palette blended half-half
    painted = fig.axes[0].get_images()[0].get_array()
    assert tuple(painted[0, 0]) == (50, 50, 50)  # blended with black
    assert tuple(painted[1, 1]) == (90, 75, 75)
    assert tuple(painted[5, 8]) == (53, 165, 165)

    clean = overlay_figure(image, prediction, CLASSES, PALETTE,
                           model_name='cbsa_vit-demo', image_name='img_0')
    assert 'img_0' in clean.get_suptitle()
    assert 'sigma 0' in clean.get_suptitle()


def test_overlay_with_ground_truth_marks_classes_in_one_panel():
    from mmseg_whitebox.visualization.overlay import overlay_figure
    image = np.zeros((6, 6, 3), dtype=np.uint8)
    truth = np.full((6, 6), 2, dtype=np.int64)
    truth[0] = 255
    prediction = np.full((6, 6), 2, dtype=np.int64)
    prediction[:, 0] = 4
    truth[:, 5] = 0
    fig = overlay_figure(image, prediction, CLASSES, PALETTE,
                         model_name='m', ground_truth=truth)
    assert [ax.get_title() for ax in fig.axes] == [
        'ground truth\n(darkened: ignored)', 'prediction']
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        'wall (ground truth only)', 'tree', 'road (prediction only)']


def test_config_name_is_the_config_file_stem():
    from mmseg_whitebox.visualization.overlay import config_name
    model = types.SimpleNamespace(cfg=types.SimpleNamespace(
        filename='/x/configs/cbsa/cbsa_vit-demo_1xb8.py'))
    assert config_name(model) == 'cbsa_vit-demo_1xb8'
    assert config_name(types.SimpleNamespace()) == 'SimpleNamespace'
