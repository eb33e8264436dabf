"""The attention registry's contract, per entry, on the real mmseg modules
inside shrunk mmseg models (tests/_mmseg_families.py): removal equals a
hand-written forward of the model without that attention, usage has one
row per image at batch 1 and 2 (equal to each image alone), noise at
sigma 0 leaves the logits bit for bit (the sweeps over mmseg's configs:
test_attention_sweeps.py)."""
import copy
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.models.attention_registry import (_BUILTIN,
                                                      registered_classes)
from mmseg_whitebox.models.attention_sites import (AttentionAblation,
                                                   AttentionUsage,
                                                   find_attention_sites)
from mmseg_whitebox.robustness import ParameterNoise, select_parameters
from mmseg_whitebox.utils.tool_error import InputError

from _helpers import labelled_batch
from _mmseg_families import (CONTRACT_FAMILIES, FAMILIES,
                             family_config_text)

ALL = {**FAMILIES, **CONTRACT_FAMILIES}
WITH_ATTENTION = [n for n in ALL if ALL[n]['classes']]


def scope(family: dict) -> str:
    return ('backbone' if family['target'] == 'encoder-attention' else
            'decode_head')


def attention_modules(model, family):
    """The family's attention modules, counted by class name (not through
    the registry); torch's own MultiheadAttention inside mmcv's is not."""
    prefix = scope(family) + '.'
    return [name for name, m in model.named_modules()
            if name.startswith(prefix)
            and type(m).__name__ in family['classes']
            and not type(m).__module__.startswith('torch.')]


@pytest.fixture(scope='module')
def family_data(tmp_path_factory):
    """Two validation images in the ADE20K layout (and two to train)."""
    from mmseg_whitebox.datasets.synthetic_ade20k import \
        generate_synthetic_ade20k
    return generate_synthetic_ade20k(
        str(tmp_path_factory.mktemp('families')), num_train=2, num_val=2,
        image_size=(64, 80), seed=3)


def family_config(name, data_root, folder) -> str:
    path = osp.join(str(folder), f'{name}.py')
    with open(path, 'w') as f:
        f.write(family_config_text(name, data_root))
    return path


@pytest.fixture(autouse=True)
def quiet_init_log():
    """mmengine logs every parameter's initialisation at INFO."""
    import logging
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


def build(name, folder, data_root='unused'):
    """The shrunk model (a copy of one built once per family), every
    all-zero parameter (zero-initialised output convs, DANet's gamma)
    drawn instead, so that each attention changes its stream."""
    if name not in _BUILT:
        from mmseg.registry import MODELS
        init_default_scope('mmseg')
        cfg = Config.fromfile(family_config(name, data_root, folder))
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        model.init_weights()
        with torch.no_grad():
            for p in model.parameters():
                if not p.any():
                    p.normal_(0, 0.2)
        _BUILT[name] = model.eval()
    return copy.deepcopy(_BUILT[name])


_BUILT = {}


def images(batch, seed=0):
    return torch.randn(batch, 3, 64, 64,
                       generator=torch.Generator().manual_seed(seed))


def logits(model, x):
    with torch.no_grad():
        out = model(x, mode='tensor')
    return out[0] if isinstance(out, (tuple, list)) else out


def without_attention(module):
    """The module's forward with its attention removed, written by hand
    per mmseg class (what each returns with no attention)."""
    cls = type(module).__name__
    zeros = lambda x, *a, **k: torch.zeros_like(x)  # noqa: E731
    if cls == 'MultiheadAttention':  # mmcv: identity (default the query)
        return lambda query, *a, identity=None, **k: (
            query if identity is None else identity)
    if cls == 'EfficientMultiheadAttention':
        return lambda x, hw, identity=None: x if identity is None else identity
    if cls in ('NonLocal2d', 'DisentangledNonLocal2d', 'PAM', 'CAM'):
        return lambda x: x
    if cls == 'SelfAttentionBlock' and 'ann_head' in type(module).__module__:
        return lambda query, key: query.new_zeros(
            query.shape[0], module.out_channels, *query.shape[2:])
    if cls == 'ObjectAttentionBlock':  # the context before the bottleneck
        return lambda query, key: module.bottleneck(
            torch.cat([torch.zeros_like(query), query], 1))
    # Swin, BEiT/MAE, Twins (GSA is called with identity 0), ISA, EMA:
    # the module's output is the update or the context
    return zeros


@pytest.mark.parametrize('name', WITH_ATTENTION)
def test_removal_equals_the_model_without_that_attention(name, tmp_path):
    family = ALL[name]
    model = build(name, tmp_path)
    sites = find_attention_sites(model, scope(family))
    assert len(sites) == len(attention_modules(model, family)) > 0
    x = images(2)
    clean = logits(model, x)
    with AttentionAblation(sites):
        removed = logits(model, x)
    assert not torch.equal(removed, clean)
    for module_name in attention_modules(model, family):
        module = model.get_submodule(module_name)
        module.forward = without_attention(module)
    torch.testing.assert_close(logits(model, x), removed, rtol=0, atol=0)


@pytest.mark.parametrize('name', WITH_ATTENTION)
def test_usage_is_one_row_per_image_at_batch_one_and_two(name, tmp_path):
    family = ALL[name]
    model = build(name, tmp_path)
    sites = find_attention_sites(model, scope(family))
    x = images(2, seed=1)
    alone = []
    for i in range(2):
        with AttentionUsage(sites, model) as usage, torch.no_grad():
            model(x[i:i + 1], labelled_batch(1)[1], mode='predict')
        assert all(len(usage.per_image[s.name]) == 1 for s in sites)
        alone.append({s.name: usage.per_image[s.name][0] for s in sites})
    with AttentionUsage(sites, model) as usage, torch.no_grad():
        model(x, labelled_batch(2)[1], mode='predict')
    for site in sites:
        rows = usage.per_image[site.name]
        assert len(rows) == 2, (site.name, rows)
        torch.testing.assert_close(
            torch.tensor(rows), torch.tensor([alone[0][site.name],
                                              alone[1][site.name]]),
            rtol=1e-5, atol=1e-7)
        assert rows[0] != rows[1] and min(rows[0] + rows[1]) > 0


@pytest.mark.parametrize('name', WITH_ATTENTION)
def test_zero_noise_leaves_logits_bit_for_bit(name, tmp_path):
    family = ALL[name]
    model = build(name, tmp_path)
    x = images(1, seed=2)
    clean = logits(model, x)
    if name == 'emanet':  # its attention has no parameters (a buffer)
        with pytest.raises(InputError, match=r'its attention \(EMAModule\) '
                           'has no parameters that count as attention'):
            select_parameters(model, family['target'])
        return
    selection = select_parameters(model, family['target'])
    with ParameterNoise(selection.parameters, 0.0, seed=5):
        assert torch.equal(logits(model, x), clean)
    with ParameterNoise(selection.parameters, 0.05, seed=5):
        assert not torch.equal(logits(model, x), clean)
    assert torch.equal(logits(model, x), clean)


def test_every_entry_has_a_contract_family(tmp_path):
    """Each mmseg/mmcv entry of the registry meets its contract tests in
    one of the families above (this project's blocks: test_robustness)."""
    covered = set()
    for name in WITH_ATTENTION:
        model = build(name, tmp_path)
        for site in find_attention_sites(model, scope(ALL[name])):
            covered.add(id(site.entry))
    # by identity: equal entries (e.g. every plain 'inside') are distinct
    builtin = {id(entry) for entry in _BUILTIN.values()}
    missing = [cls.__name__ for cls, entry in registered_classes().items()
               if id(entry) in builtin and id(entry) not in covered]
    assert not missing, missing


def test_parameters_that_count(tmp_path):
    """The table of docs/robustness.md: no norms, no relative-position
    tables, no SegFormer reduction conv; BEiT's layer scale in the
    update, not in the parameters; DANet's gamma counted."""
    def counted(name, target):
        model = build(name, tmp_path)
        return [n for n, _ in select_parameters(model, target).parameters]

    segformer = counted('segformer', 'encoder-attention')
    assert segformer and not any('.sr.' in n or '.norm.' in n
                                 for n in segformer)
    swin = counted('swin', 'encoder-attention')
    assert len(swin) == 8 * 4 and not any('relative_position' in n
                                          for n in swin)
    beit = counted('beit', 'encoder-attention')
    assert not any('gamma' in n or 'relative_position' in n for n in beit)
    assert {n.rsplit('.', 1)[-1] for n in beit} >= {'q_bias', 'v_bias'}
    danet = counted('danet', 'decoder-attention')
    assert 'decode_head.pam.gamma.scale' in danet
    assert 'decode_head.cam.gamma.scale' in danet
    assert not any('.bn.' in n for n in counted('nonlocal',
                                                'decoder-attention'))


def test_beit_usage_includes_its_layer_scale(tmp_path):
    model = build('beit', tmp_path)
    site = find_attention_sites(model, 'backbone')[0]
    x = images(1, seed=3)
    with AttentionUsage([site]) as usage:
        logits(model, x)
    with torch.no_grad():
        site.block.gamma_1.mul_(3)
    with AttentionUsage([site]) as tripled:
        logits(model, x)
    torch.testing.assert_close(tripled.ratios[site.name][0],
                               3 * usage.ratios[site.name][0], rtol=1e-6,
                               atol=0)


def test_part_without_attention_is_named(tmp_path):
    model = build('deeplabv3', tmp_path)
    with pytest.raises(InputError) as info:
        select_parameters(model, 'decoder-attention')
    message = str(info.value)
    assert 'the decode head has no attention layers' in message
    assert 'linear decoder' not in message
    with pytest.raises(InputError, match=r'the encoder \(backbone\) has no '
                       'attention layers; use --target decoder-attention'):
        select_parameters(model, 'encoder-attention')


def test_unregistered_attention_is_refused_by_name(tmp_path):
    """A module whose class looks like attention but has no entry: the
    sweep refuses, naming it, instead of measuring part of the model."""
    import torch.nn as nn
    model = build('segmenter', tmp_path)

    class WindowAttention(nn.Module):
        def forward(self, x):
            return x

    model.decode_head.extra = nn.ModuleList(
        [WindowAttention(), WindowAttention()])
    with pytest.raises(InputError, match=r'2 WindowAttention in the decode '
                       r'head \(decode_head.extra.0, ...\) look like '
                       'attention but have no attention entry: register '
                       'one'):
        select_parameters(model, 'decoder-attention')
    # a regular expression still reaches the rest (no removal, no usage)
    assert select_parameters(model, r'decode_head\.layers\.0\.').sites
