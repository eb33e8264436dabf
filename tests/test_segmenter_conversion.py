"""Segmenter-codebase checkpoints (Segmenter mask/linear, DEPICT-SA/CA,
CBT) converted onto this project's configs: state dicts built here with
the published key names and shapes (described from the published modules:
rstrudel/segmenter segm/model/{vit,blocks,decoder}.py, QishuaiWen/DEPICT
model/{decoder,dec_blocks}.py, QishuaiWen/CBSA
CBSA_semantic_segmentation/segm/model/{decoder,dec_blocks}.py) load with
strict=True, and the converted models compute what the published forward
passes compute (re-implemented here, float64)."""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
import yaml
from mmengine.config import Config

from mmseg_whitebox.converters import segmenter as sc
from mmseg_whitebox.converters.state_dicts import convert_segmenter_file

from _helpers import REPO, run_tool

D, ENC_LAYERS, PATCH, GRID, N_CLS = 64, 2, 16, 4, 5  # tiny published models
HEADS = 2  # DEPICT / CBT subspaces (x 100; CA cross layers x 50)


def encoder_shapes(d=D, layers=ENC_LAYERS, grid=GRID):
    """segm/model/vit.py VisionTransformer (with its 1000-class head) of
    segm/model/blocks.py Blocks (MLP ratio 4)."""
    shapes = {'encoder.cls_token': (1, 1, d),
              'encoder.pos_embed': (1, 1 + grid * grid, d),
              'encoder.patch_embed.proj.weight': (d, 3, PATCH, PATCH),
              'encoder.patch_embed.proj.bias': (d, ),
              'encoder.norm.weight': (d, ), 'encoder.norm.bias': (d, ),
              'encoder.head.weight': (1000, d), 'encoder.head.bias': (1000, )}
    for i in range(layers):
        shapes.update(block_shapes(f'encoder.blocks.{i}', d))
    return shapes


def block_shapes(prefix, d):
    return {f'{prefix}.norm1.weight': (d, ), f'{prefix}.norm1.bias': (d, ),
            f'{prefix}.attn.qkv.weight': (3 * d, d),
            f'{prefix}.attn.qkv.bias': (3 * d, ),
            f'{prefix}.attn.proj.weight': (d, d),
            f'{prefix}.attn.proj.bias': (d, ),
            f'{prefix}.norm2.weight': (d, ), f'{prefix}.norm2.bias': (d, ),
            f'{prefix}.mlp.fc1.weight': (4 * d, d),
            f'{prefix}.mlp.fc1.bias': (4 * d, ),
            f'{prefix}.mlp.fc2.weight': (d, 4 * d),
            f'{prefix}.mlp.fc2.bias': (d, )}


def norm(name, width):
    return {f'{name}.weight': (width, ), f'{name}.bias': (width, )}


def decoder_shapes(kind, d=D, n_cls=N_CLS, heads=HEADS, layers=3,
                   mask_layers=2):
    masks = {'decoder.cls_emb': (1, n_cls, d),
             **norm('decoder.mask_norm', n_cls)}
    shapes = {}
    if kind == 'mask':  # MaskTransformer: 2 blocks, d // 64 heads
        shapes = {**masks, 'decoder.proj_dec.weight': (d, d),
                  'decoder.proj_dec.bias': (d, ),
                  'decoder.proj_patch': (d, d),
                  'decoder.proj_classes': (d, d),
                  **norm('decoder.decoder_norm', d)}
        for i in range(mask_layers):
            shapes.update(block_shapes(f'decoder.blocks.{i}', d))
    elif kind == 'linear':  # DecoderLinear
        shapes = {'decoder.head.weight': (n_cls, d),
                  'decoder.head.bias': (n_cls, )}
    elif kind == 'depict-sa':  # PreNorm(Attention): bare proj, step_size
        shapes = {**masks, **norm('decoder.decoder_norm', d)}
        for i in range(layers):
            shapes.update({**norm(f'decoder.net.layers.{i}.norm', d),
                           f'decoder.net.layers.{i}.fn.proj': (heads * 100,
                                                               d),
                           f'decoder.net.layers.{i}.fn.step_size': (1, )})
    elif kind == 'depict-ca':  # snet (dim_head 100), cnet (3 x 50)
        shapes = {**masks, **norm('decoder.snorm', d),
                  **norm('decoder.cnorm', d)}
        for net, n, p in (('snet', layers, 100), ('cnet', 3, 50)):
            for i in range(n):
                prefix = f'decoder.{net}.layers.{i}'
                shapes.update({**norm(f'{prefix}.norm', d),
                               f'{prefix}.fn.proj': (heads * p, d),
                               f'{prefix}.fn.step_size': (1, )})
    elif kind == 'cbt':  # PreNorm(CBSA Attention) x 3, 100-dim heads
        shapes = {**masks, **norm('decoder.decoder_norm', d)}
        for i in range(layers):
            fn = f'decoder.net.layers.{i}.fn'
            shapes.update({**norm(f'decoder.net.layers.{i}.norm', d),
                           f'{fn}.proj.weight': (heads * 100, d),
                           f'{fn}.step_x': (heads, 1, 1),
                           f'{fn}.step_rep': (heads, 1, 1),
                           f'{fn}.to_out.weight': (d, heads * 100),
                           f'{fn}.to_out.bias': (d, )})
    return shapes


def published_state(kind, seed=0, **sizes):
    return random_state({**encoder_shapes(), **decoder_shapes(kind, **sizes)},
                        seed)


def random_state(shapes, seed=0):
    """float64 values for ``shapes`` (key -> shape): LayerNorm weights
    near 1, linear weights scaled by 1 / sqrt(fan-in)."""
    torch.manual_seed(seed)
    state = {}
    for key, shape in shapes.items():
        value = torch.randn(shape, dtype=torch.float64)
        if 'norm' in key and key.endswith('weight'):
            value = 1 + 0.1 * value
        elif key.endswith('proj') or 'proj.weight' in key or 'fc' in key \
                or 'qkv' in key or 'to_out' in key or 'head.' in key:
            value = value * shape[-1]**-0.5
        state[key] = value
    return state


def variant(kind, n_cls=N_CLS, heads=HEADS, dec_layers=3):
    """net_kwargs as segm/train.py writes them (image_size a tuple)."""
    decoder = dict(name='linear' if kind == 'linear' else 'mask_transformer',
                   dropout=0.0, n_layers=2 if kind == 'mask' else dec_layers)
    if kind in ('depict-sa', 'depict-ca', 'cbt'):
        decoder['n_heads'] = heads
    if kind == 'linear':
        decoder = dict(name='linear')
    return dict(backbone='vit_tiny_patch16_384', d_model=D, n_heads=2,
                n_layers=ENC_LAYERS, patch_size=PATCH, normalization='vit',
                distilled=False, dropout=0.0, drop_path_rate=0.1,
                image_size=(GRID * PATCH, GRID * PATCH), n_cls=n_cls,
                decoder=decoder)


FAMILY = {'mask': 'segmenter_vit-t_mask_', 'linear': 'segmenter_vit-s_linear',
          'depict-sa': 'mssa_vit-t_', 'depict-ca': 'mssa-ca_vit-t_',
          'cbt': 'cbsa_vit-t_'}


def convert_and_load(kind, state, net, **settings):
    converted, dropped, unmapped = sc.segmenter_to_mmseg(state)
    assert unmapped == []
    assert dropped == ['encoder.head.weight', 'encoder.head.bias']
    model = sc.describe(state, net)
    assert model.kind == kind
    config = sc.pick_config(model, osp.join(REPO, 'configs'))
    assert osp.basename(config).startswith(FAMILY[kind])
    cfg = Config.fromfile(config)
    overrides = sc.differences(
        dict(model=sc.model_settings(model, **settings)),
        dict(model=cfg.model.to_dict()))
    cfg.merge_from_dict(overrides)
    segmentor = sc.load_strictly(cfg.model.to_dict(), converted).double()
    segmentor.load_state_dict(converted, strict=True)  # again, in float64
    return segmentor.eval(), converted


@pytest.mark.parametrize('kind', sc.KINDS)
def test_published_checkpoints_load_strictly(kind):
    state = published_state(kind)
    model, converted = convert_and_load(kind, state, variant(kind))
    own = model.state_dict()
    assert own.keys() == converted.keys()  # round trip: every tensor used
    for key, value in converted.items():
        assert torch.equal(own[key], value.to(own[key].dtype)), key
    head = model.decode_head
    if kind == 'mask':  # x @ P applied as a Linear
        assert torch.equal(head.patch_proj.weight,
                           state['decoder.proj_patch'].t())
    if kind == 'cbt':
        assert torch.equal(head.layers[2].attn.kappa,
                           state['decoder.net.layers.2.fn.step_x'])
        # the released training (configs/_base_/models/cbsa_vit-b16.py)
        assert not head.layers[0].attn.rep_stop_grad
    assert model.backbone.ln1.eps == 1e-5  # the released LayerNorm


def test_cbt_head_option_for_released_gradients():
    model, _ = convert_and_load('cbt', published_state('cbt'), None,
                                released_gradients=True)
    assert not any(layer.attn.rep_stop_grad
                   for layer in model.decode_head.layers)


# --- the published forward passes, re-implemented from reading them -----
def layer_norm(x, state, name):
    return F.layer_norm(x, x.shape[-1:], state[f'{name}.weight'],
                        state[f'{name}.bias'], eps=1e-5)


def linear(x, state, name):
    return x @ state[f'{name}.weight'].t() + state[f'{name}.bias']


def vit_block(x, state, prefix, heads):
    b, n, c = x.shape
    qkv = linear(layer_norm(x, state, f'{prefix}.norm1'), state,
                 f'{prefix}.attn.qkv')
    q, k, v = qkv.reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
    attn = torch.softmax(q @ k.transpose(-2, -1) * (c // heads)**-0.5, -1)
    x = x + linear((attn @ v).transpose(1, 2).reshape(b, n, c), state,
                   f'{prefix}.attn.proj')
    hidden = F.gelu(linear(layer_norm(x, state, f'{prefix}.norm2'), state,
                           f'{prefix}.mlp.fc1'))
    return x + linear(hidden, state, f'{prefix}.mlp.fc2')


def segmenter_forward(state, image, n_cls=N_CLS):
    """Segmenter's encoder + mask transformer, patch-level masks."""
    x = F.conv2d(image, state['encoder.patch_embed.proj.weight'],
                 state['encoder.patch_embed.proj.bias'], stride=PATCH)
    b, _, h, w = x.shape
    x = torch.cat([state['encoder.cls_token'].expand(b, -1, -1),
                   x.flatten(2).transpose(1, 2)], 1)
    x = x + state['encoder.pos_embed']
    for i in range(ENC_LAYERS):
        x = vit_block(x, state, f'encoder.blocks.{i}', heads=2)
    x = layer_norm(x, state, 'encoder.norm')[:, 1:]
    return mask_decoder_forward(state, x, (h, w), n_cls)


def mask_decoder_forward(state, x, hw, n_cls=N_CLS):
    """Segmenter's mask transformer (its blocks of d // 64 heads) on the
    encoder's patch tokens ``(B, N, d)``: patch-level masks."""
    b, _, d = x.shape
    x = linear(x, state, 'decoder.proj_dec')
    x = torch.cat([x, state['decoder.cls_emb'].expand(b, -1, -1)], 1)
    blocks = {k.split('.')[2] for k in state
              if k.startswith('decoder.blocks.')}
    for i in range(len(blocks)):
        x = vit_block(x, state, f'decoder.blocks.{i}', heads=d // 64)
    x = layer_norm(x, state, 'decoder.decoder_norm')
    patches = F.normalize(x[:, :-n_cls] @ state['decoder.proj_patch'], dim=-1)
    classes = F.normalize(x[:, -n_cls:] @ state['decoder.proj_classes'],
                          dim=-1)
    masks = layer_norm(patches @ classes.transpose(1, 2), state,
                       'decoder.mask_norm')
    return masks.transpose(1, 2).reshape(b, n_cls, *hw)


def cbt_decoder_forward(state, tokens, hw, heads=HEADS, p=100, n_cls=N_CLS,
                        layers=3, rep_grid=(10, 10)):
    """The released CBT decoder (dec_blocks.Attention in a pre-norm
    residual Transformer, then the mask frame), with its hard-coded
    square grid, 150 classes and 300-wide projection generalised."""
    b, n, _ = tokens.shape
    h, w = hw
    x = torch.cat([tokens, state['decoder.cls_emb'].expand(b, -1, -1)], 1)
    total = x.shape[1]
    for i in range(layers):
        fn = f'decoder.net.layers.{i}.fn'
        y = layer_norm(x, state, f'decoder.net.layers.{i}.norm')
        proj = y @ state[f'{fn}.proj.weight'].t()  # (B, N + K, heads * p)
        grid = proj[:, :n].reshape(b, h, w, heads * p).permute(0, 3, 1, 2)
        rep = F.adaptive_avg_pool2d(grid, rep_grid).flatten(2).transpose(1, 2)
        m = rep.shape[1]
        proj = proj.reshape(b, total, heads, p).transpose(1, 2)
        rep = rep.reshape(b, m, heads, p).transpose(1, 2)
        attn = torch.softmax(rep @ proj.transpose(-1, -2) * p**-0.5, -1)
        rep = rep + state[f'{fn}.step_rep'] * (attn @ proj)
        contracted = torch.softmax(rep @ rep.transpose(-1, -2) * p**-0.5,
                                   -1) @ rep
        delta = state[f'{fn}.step_x'] * (attn.transpose(-1, -2) @ contracted)
        x = x + linear(delta.transpose(1, 2).reshape(b, total, heads * p),
                       state, f'{fn}.to_out')
    x = layer_norm(x, state, 'decoder.decoder_norm')
    patches = F.normalize(x[:, :-n_cls], dim=-1)
    classes = F.normalize(x[:, -n_cls:], dim=-1)
    masks = layer_norm(patches @ classes.transpose(1, 2), state,
                       'decoder.mask_norm')
    return masks.transpose(1, 2).reshape(b, n_cls, h, w)


def test_converted_segmenter_is_the_published_model():
    state = published_state('mask')
    model, _ = convert_and_load('mask', state, variant('mask'))
    image = torch.randn(2, 3, GRID * PATCH, GRID * PATCH,
                        dtype=torch.float64)
    with torch.no_grad():
        ours = model.decode_head(model.backbone(image))
    torch.testing.assert_close(ours, segmenter_forward(state, image),
                               rtol=0, atol=1e-10)


def depict_update(x, state, prefix, heads, p, query=None):
    """The released DEPICT PreNorm(Attention) update: one bare projection
    for query = key = value, back through it, times the step size; in
    cross-attention (``query``) the queries are not normalised."""
    proj = state[f'{prefix}.fn.proj']

    def split(t):
        return (t @ proj.t()).reshape(t.shape[0], -1, heads,
                                      p).transpose(1, 2)

    w = split(layer_norm(x, state, f'{prefix}.norm'))
    q = w if query is None else split(query)
    attn = torch.softmax(q @ w.transpose(-1, -2) * p**-0.5, -1)
    out = (attn @ w).transpose(1, 2).reshape(q.shape[0], -1, heads * p)
    return state[f'{prefix}.fn.step_size'] * (out @ proj)


def depict_decoder_forward(state, tokens, hw, mode, heads=HEADS,
                           n_cls=N_CLS):
    """The released DEPICT decoder (mode 'sa' or 'ca'), any grid."""
    b = tokens.shape[0]
    classes = state['decoder.cls_emb'].expand(b, -1, -1)
    if mode == 'sa':
        x = torch.cat([tokens, classes], 1)
        for i in range(3):
            x = x + depict_update(x, state, f'decoder.net.layers.{i}',
                                  heads, 100)
        x = layer_norm(x, state, 'decoder.decoder_norm')
        patches, classes = x[:, :-n_cls], x[:, -n_cls:]
    else:
        x = tokens
        for i in range(3):
            x = x + depict_update(x, state, f'decoder.snet.layers.{i}',
                                  heads, 100)
        patches = layer_norm(x, state, 'decoder.snorm')
        for i in range(3):
            classes = classes + depict_update(
                patches, state, f'decoder.cnet.layers.{i}', heads, 50,
                query=classes)
        classes = layer_norm(classes, state, 'decoder.cnorm')
    masks = F.normalize(patches, dim=-1) @ F.normalize(
        classes, dim=-1).transpose(1, 2)
    masks = layer_norm(masks, state, 'decoder.mask_norm')
    return masks.transpose(1, 2).reshape(b, n_cls, *hw)


DECODER_CASES = [('cbt', (10, 10)), ('cbt', (11, 14)),
                 ('depict-sa', (11, 14)), ('depict-ca', (11, 14))]


@pytest.mark.parametrize('kind,hw', DECODER_CASES)
def test_converted_decoder_is_the_published_decoder(kind, hw):
    """CBT (and DEPICT) decoders, converted, compute the released forward
    pass (its square-grid / 150-class assumptions generalised) to 1e-10
    in float64, on square and non-square token grids."""
    state = published_state(kind, seed=1)
    model, _ = convert_and_load(kind, state, variant(kind))
    tokens = torch.randn(2, hw[0] * hw[1], D, dtype=torch.float64)
    feature = tokens.transpose(1, 2).reshape(2, D, *hw)
    with torch.no_grad():
        ours = model.decode_head([feature])
    if kind == 'cbt':
        expected = cbt_decoder_forward(state, tokens, hw)
    else:
        expected = depict_decoder_forward(state, tokens, hw, kind[-2:])
    assert ours.shape == (2, N_CLS, *hw)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-10)


def test_variant_disagreement_is_reported():
    state = published_state('depict-sa')
    net = variant('depict-sa', n_cls=150, heads=3)
    with pytest.raises(ValueError, match='n_cls: variant.yml says 150') as e:
        sc.describe(state, net)
    assert 'decoder n_heads: variant.yml says 3' in str(e.value)
    with pytest.raises(ValueError, match='not a Segmenter-codebase'):
        sc.detect_decoder(encoder_shapes())


def test_converter_tool(tmp_path):
    """150 classes: the ADE20K config, whose class names go into the
    checkpoint's meta for init_model."""
    from mmseg.apis import init_model
    state = published_state('cbt', n_cls=150)
    src = tmp_path / 'CBT-tiny'
    src.mkdir()
    # as segm/train.py saves them: the model under 'model', and the
    # variant (tuples tagged by yaml.dump) beside it
    torch.save(dict(model={k: v.float() for k, v in state.items()},
                    epoch=63, n_cls=150), src / 'checkpoint.pth')
    (src / 'variant.yml').write_text(yaml.dump(
        dict(net_kwargs=variant('cbt', n_cls=150), world_batch_size=8)))
    assert '!!python/tuple' in (src / 'variant.yml').read_text()
    dst = tmp_path / 'out' / 'cbt_tiny.pth'
    proc = run_tool(['tools/model_converters/segmenter2mmseg.py',
                     str(src / 'checkpoint.pth'), str(dst)])
    assert 'loaded strictly' in proc.stdout
    assert 'cbsa_vit-t_8xb1-160k_ade20k-512x512.py' in proc.stdout
    config = tmp_path / 'out' / 'cbt_tiny.py'
    model = init_model(str(config), str(dst), device='cpu')
    assert model.decode_head.num_classes == 150
    assert model.dataset_meta['classes'][:2] == ['wall', 'building']
    assert torch.equal(model.decode_head.layers[1].attn.eta,
                       state['decoder.net.layers.1.fn.step_rep'].float())
    saved = torch.load(dst, weights_only=True)
    assert saved['meta']['decoder'] == 'cbt'

    # a key nothing maps: one clear error, nothing written (in-process,
    # to spare a second interpreter start)
    odd = dict(state, **{'decoder.net.layers.0.fn.odd': torch.zeros(1)})
    torch.save(dict(model=odd), src / 'odd.pth')
    out = tmp_path / 'odd' / 'x.pth'
    with pytest.raises(ValueError, match='cannot be mapped') as error:
        convert_segmenter_file(str(src / 'odd.pth'), str(out))
    assert 'decoder.net.layers.0.fn.odd' in str(error.value)
    assert not (tmp_path / 'odd').exists()
