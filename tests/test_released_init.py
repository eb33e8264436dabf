"""Initialisation as released: every published decoder, and every encoder
the published configs train from scratch, starts from the distributions
its released factory draws.

Each released model is re-implemented here from reading its files (never
imported or copied) and built as its factory builds it (same modules, same
``init`` calls), next to the project's module built from the published
config (``Config.fromfile`` + ``MODELS.build``) and initialised as
mmengine's runner does (``init_weights()``). Every tensor of the project's
module (parameters and buffers) is paired with the released tensor of the
same role, and every released tensor built is paired:

* a released tensor that is the same under every seed (LayerNorm ones and
  zeros, zero biases, BatchNorm statistics) must be equal exactly;
* a random one: std within 15 % (relative) and mean within 0.1 released
  std. A tensor of at least 3,200 values is compared alone, with exactly
  these tolerances; smaller ones (biases, CLS tokens, step sizes) are
  pooled per role over the layers and over seeds until each side has at
  least 128 values, and the tolerances widen to 4 standard errors of the
  pooled sample where that is more (std ``4 / sqrt(n)``, mean
  ``4 sqrt(2 / n)`` std): at 64 values the standard error of a mean is
  0.18 std, so the 0.1 std bound would reject the released distribution
  itself about half of the time.

Released files: Segmenter ``rstrudel/segmenter`` 20d1bfa (``segm/model``),
CBT ``QishuaiWen/CBSA`` 7dc01a1 (``CBSA_semantic_segmentation/segm/model``
for the decoder, ``CBSA_image_classification`` for the encoder), DEPICT
``QishuaiWen/DEPICT`` 6c66e2b (``model/``), CRATE
``Ma-Lab-Berkeley/CRATE`` 071ea98 (``model/crate.py``), ToST
``RobinWu218/ToST`` 674408f (``tost_vision/tost.py``). timm 0.4.12's
``trunc_normal_`` (the released decoders' and ToST's) cuts at +-2 absolute
(100 std at std 0.02), as ``torch.nn.init.trunc_normal_(a=-2, b=2)``.
"""
import os.path as osp
import re
from typing import Callable, Dict, List, Optional, Tuple, Union

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import init_default_scope

from _helpers import REPO

STD_TOLERANCE = 0.15  # relative
MEAN_TOLERANCE = 0.1  # of the released std
STANDARD_ERRORS = 4  # the widened tolerance of small pooled samples
ALONE = 3200  # values from which a tensor is compared on its own
MIN_POOLED = 128  # values per side of a pooled comparison
MAX_SEEDS = 128
Tensors = Dict[str, torch.Tensor]
Template = Union[str, Callable[[re.Match], str]]
Rules = List[Tuple[str, Template]]


# --- the released modules, re-implemented ------------------------------
def tree(**children) -> nn.Module:
    """A module with the given submodules and parameters, named as the
    released attributes."""
    module = nn.Module()
    for name, child in children.items():
        if isinstance(child, nn.Module):
            module.add_module(name, child)
        else:
            module.register_parameter(name, nn.Parameter(child))
    return module


def timm_trunc_normal(tensor: torch.Tensor, std: float = 0.02) -> None:
    """timm 0.4.12 ``trunc_normal_``: N(0, std) cut at +-2 absolute."""
    with torch.no_grad():
        nn.init.trunc_normal_(tensor, std=std, a=-2.0, b=2.0)


def released_init(module: nn.Module) -> None:
    """segm/model/utils.py:12-19 (also the CBT and DEPICT forks) and ToST
    tost_vision/tost.py:401-408, applied to every submodule."""
    if isinstance(module, nn.Linear):
        timm_trunc_normal(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def segmenter_block(d: int) -> nn.Module:
    """segm/model/blocks.py:16-24,39-50,80-87 (the parameters)."""
    return tree(norm1=nn.LayerNorm(d), norm2=nn.LayerNorm(d),
                attn=tree(qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d)),
                mlp=tree(fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d)))


def segmenter_mask(n_cls: int, d: int) -> nn.Module:
    """segm/model/decoder.py:37-74 as segm/model/factory.py:89-95 builds it
    (d_model = encoder width, MLP 4 d; 2 layers, config.yml:101)."""
    decoder = tree(
        blocks=nn.ModuleList(segmenter_block(d) for _ in range(2)),
        cls_emb=torch.randn(1, n_cls, d),
        proj_dec=nn.Linear(d, d),
        proj_patch=d**-0.5 * torch.randn(d, d),
        proj_classes=d**-0.5 * torch.randn(d, d),
        decoder_norm=nn.LayerNorm(d), mask_norm=nn.LayerNorm(n_cls))
    decoder.apply(released_init)
    timm_trunc_normal(decoder.cls_emb)
    return decoder


def segmenter_linear(n_cls: int, d: int) -> nn.Module:
    """segm/model/decoder.py:13-22."""
    decoder = tree(head=nn.Linear(d, n_cls))
    decoder.apply(released_init)
    return decoder


def cbt_attention(d: int, heads: int, p: int, out: bool = True) -> nn.Module:
    """CBSA_semantic_segmentation/segm/model/dec_blocks.py:60-74 (also
    CBSA_image_classification/attn_layers.py:85-99); ``out=False``: the
    tied CBT-dagger, which has no ``to_out``."""
    parts = dict(proj=nn.Linear(d, heads * p, bias=False),
                 step_x=torch.randn(heads, 1, 1),
                 step_rep=torch.randn(heads, 1, 1))
    if out:
        parts['to_out'] = nn.Linear(heads * p, d)
    return tree(**parts)


def depict_attention(d: int, heads: int, p: int) -> nn.Module:
    """DEPICT model/dec_blocks.py:23-36."""
    return tree(proj=d**-0.5 * torch.randn(heads * p, d),
                step_size=torch.randn(1))


def tost_attention(d: int, heads: int, inner: int, bias: bool) -> nn.Module:
    """ToST tost_vision/tost.py:257-273 (``qkv`` of width ``inner``)."""
    return tree(qkv=nn.Linear(d, inner, bias=bias),
                temp=torch.ones(heads, 1),
                to_out=nn.Sequential(nn.Linear(inner, d), nn.Dropout(0.0)))


def pre_norm_layers(d: int, attentions: List[nn.Module]) -> nn.Module:
    """``Transformer`` of dec_blocks.py (CBT 109-117, DEPICT 60-68): one
    pre-LayerNorm per attention."""
    return tree(layers=nn.ModuleList(
        tree(norm=nn.LayerNorm(d), fn=attn) for attn in attentions))


def mask_frame(n_cls: int, d: int, nets: Dict[str, nn.Module],
               norms: Tuple[str, ...]) -> nn.Module:
    """The decoder frame of the CBT and DEPICT forks (CBT decoder.py:
    10-31, DEPICT decoder.py:10-42): class embeddings, the layer stacks,
    their norms, the mask norm; ``apply(init_weights)``, then the class
    embeddings trunc-normal 0.02."""
    decoder = tree(cls_emb=torch.randn(1, n_cls, d), **nets,
                   **{name: nn.LayerNorm(d) for name in norms},
                   mask_norm=nn.LayerNorm(n_cls))
    decoder.apply(released_init)
    timm_trunc_normal(decoder.cls_emb)
    return decoder


def cbt_decoder(n_cls: int, d: int, heads: int,
                out: bool = True) -> nn.Module:
    """CBSA_semantic_segmentation/segm/model/decoder.py:10-31: 3 layers of
    ``heads`` x 100 (config.yml:98-101)."""
    net = pre_norm_layers(d, [cbt_attention(d, heads, 100, out)
                              for _ in range(3)])
    return mask_frame(n_cls, d, dict(net=net), ('decoder_norm', ))


def depict_decoder(n_cls: int, d: int, heads: int, mode: str) -> nn.Module:
    """DEPICT model/decoder.py:10-42 (config.yml:98-101: 3 layers; CA: 3
    cross layers of 50 dims)."""
    def stack(p):
        return pre_norm_layers(d, [depict_attention(d, heads, p)
                                   for _ in range(3)])

    if mode == 'sa':
        return mask_frame(n_cls, d, dict(net=stack(100)),
                          ('decoder_norm', ))
    return mask_frame(n_cls, d, dict(snet=stack(100), cnet=stack(50)),
                      ('snorm', 'cnorm'))


def tssa_decoder(n_cls: int, d: int, heads: int) -> nn.Module:
    """No TSSA decoder is released: the CBT decoder's frame with ToST's
    operator (``heads`` x 100, no ``qkv`` bias, as eq. 10 and the head's
    config), both initialised as released (timm-style ``apply``)."""
    net = pre_norm_layers(d, [tost_attention(d, heads, heads * 100, False)
                              for _ in range(3)])
    return mask_frame(n_cls, d, dict(net=net), ('decoder_norm', ))


def ista(d: int) -> nn.Module:
    """CRATE model/crate.py:24-29, CBT CBSA_image_classification/
    models.py:80-85: ``kaiming_uniform_`` with its defaults."""
    weight = torch.empty(d, d)
    nn.init.kaiming_uniform_(weight)
    return tree(weight=weight)


def conv_stem(d: int) -> nn.Module:
    """CBT CBSA_image_classification/models.py:27-58 (as ToST
    tost.py:59-91), patch 16: four 3x3 stride-2 convolutions without bias,
    each with a (Sync)BatchNorm, at PyTorch's defaults."""
    widths = [3, d // 8, d // 4, d // 2, d]
    layers: List[nn.Module] = []
    for c_in, c_out in zip(widths, widths[1:]):
        layers += [nn.Sequential(nn.Conv2d(c_in, c_out, 3, 2, 1, bias=False),
                                 nn.BatchNorm2d(c_out)), nn.GELU()]
    return tree(proj=nn.Sequential(*layers[:-1]))


def crate_attention(d: int, heads: int, p: int,
                    sequential_out: bool) -> nn.Module:
    """CRATE model/crate.py:46-63 (``to_out`` in a Sequential with its
    dropout) and the CBT repository's MSSA, attn_layers.py:52-66."""
    out = nn.Linear(heads * p, d)
    return tree(qkv=nn.Linear(d, heads * p, bias=False),
                to_out=nn.Sequential(out, nn.Dropout(0.0))
                if sequential_out else out)


def white_box_transformer(d: int, attentions: List[nn.Module]) -> nn.Module:
    """CRATE model/crate.py:79-94 and CBT models.py:102-117: per layer a
    pre-norm attention and a pre-norm ISTA."""
    return tree(layers=nn.ModuleList(
        nn.ModuleList([tree(norm=nn.LayerNorm(d), fn=attn),
                       tree(norm=nn.LayerNorm(d), fn=ista(d))])
        for attn in attentions))


def crate_encoder(d: int, heads: int, p: int, grid: int) -> Tensors:
    """CRATE model/crate.py:105-139 (``CRATE_tiny``, 159-170: 12 layers)
    at ``grid`` x ``grid`` patches of 16, initialised by nothing but its
    modules; the ImageNet classifier ``mlp_head.1`` is left out (a
    backbone has none)."""
    patch_dim = 3 * 16 * 16
    return named_tensors(tree(
        to_patch_embedding=nn.Sequential(
            nn.Identity(), nn.LayerNorm(patch_dim), nn.Linear(patch_dim, d),
            nn.LayerNorm(d)),
        pos_embedding=torch.randn(1, grid * grid + 1, d),
        cls_token=torch.randn(1, 1, d),
        transformer=white_box_transformer(
            d, [crate_attention(d, heads, p, True) for _ in range(12)]),
        mlp_head=nn.Sequential(nn.LayerNorm(d))))


def cbt_encoder(d: int, heads: int, p: int, grid: int) -> Tensors:
    """CBT CBSA_image_classification/models.py:127-160 (``Ours_tiny``,
    248-259: CBSA, ISTA, 12 layers), no classifier; its convolutional
    stem, and the released Segmenter ViT's patch convolution, which the
    published CBT configs use in its place (:func:`segmenter_frame`)."""
    attentions = [cbt_attention(d, heads, p) for _ in range(12)]
    tensors = named_tensors(tree(
        to_patch_embedding=conv_stem(d),
        pos_embedding=torch.randn(1, grid * grid + 1, d),
        cls_token=torch.randn(1, 1, d),
        transformer=white_box_transformer(d, attentions),
        mlp_head=nn.Sequential(nn.LayerNorm(d))))
    return {**tensors, **segmenter_frame(d, grid)}


def tost_encoder(d: int, heads: int, grid: int) -> Tensors:
    """ToST tost_vision/tost.py:299-327,330-408 (``tost_cab_tiny_12_p16``,
    450-454: 12 blocks, ``qkv_bias``): the blocks' attention and MLP, the
    CLS token and the final norm, with the released Segmenter ViT's patch
    convolution and learned positions of the project's frame. ToST's conv
    stem, layer scales, class-attention blocks, Fourier positions and
    classifier have no counterpart in the frame and are not built."""
    blocks = nn.ModuleList(
        tree(norm1=nn.LayerNorm(d), norm2=nn.LayerNorm(d),
             attn=tost_attention(d, heads, d, True),
             mlp=tree(fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d)))
        for _ in range(12))
    encoder = tree(cls_token=torch.zeros(1, 1, d), blocks=blocks,
                   norm=nn.LayerNorm(d))
    timm_trunc_normal(encoder.cls_token)
    encoder.apply(released_init)
    return {**named_tensors(encoder), **segmenter_frame(d, grid)}


def segmenter_frame(d: int, grid: int) -> Tensors:
    """The released Segmenter ViT's patch convolution (PyTorch's default:
    its init_weights touches Linear and LayerNorm only) and position
    embedding (trunc-normal 0.02), segm/model/vit.py:28-30,78-80,92,98:
    the frame of the project's encoders, compared where a released
    white-box encoder has no such part (the frame's patch embedding has no
    bias)."""
    frame = tree(proj=nn.Conv2d(3, d, 16, 16, bias=False),
                 pos_embed=torch.randn(1, grid * grid + 1, d))
    timm_trunc_normal(frame.pos_embed)
    return named_tensors(frame, 'frame.')


def named_tensors(module: nn.Module, prefix: str = '') -> Tensors:
    """Parameters and buffers by name."""
    out = {prefix + n: p.detach() for n, p in module.named_parameters()}
    out.update({prefix + n: b for n, b in module.named_buffers()})
    return out


# --- the project's modules, from the published configs ------------------
def load_config(name: str) -> Config:
    folder = re.match(r'[a-z]+', name)[0]
    return Config.fromfile(osp.join(REPO, 'configs', folder, name + '.py'))


def built(cfg: Config) -> nn.Module:
    """``cfg`` built and initialised as the runner initialises it."""
    import mmseg_whitebox  # noqa: F401  (registers the project's modules)
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    module = MODELS.build(cfg)
    module.init_weights()
    return module


# --- pairing and comparing ----------------------------------------------
def pair(ours: Tensors, released: Tensors,
         rules: Rules) -> List[Tuple[str, str]]:
    """(our name, released name) for every tensor of ours, by the first
    rule whose pattern matches it fully; every released tensor must be
    paired exactly once and the two of a pair hold as many values."""
    pairs, unmatched = [], []
    for name in ours:
        for pattern, template in rules:
            if re.fullmatch(pattern, name):
                pairs.append((name, re.sub(pattern, template, name)))
                break
        else:
            unmatched.append(name)
    assert not unmatched, f'no released counterpart for {unmatched}'
    targets = sorted(r for _, r in pairs)
    assert targets == sorted(released), (
        'released tensors not paired exactly once: '
        f'{sorted(set(released) ^ set(targets))}')
    for o, r in pairs:
        assert ours[o].numel() == released[r].numel(), (o, r)
    return pairs


def mismatch(ours: torch.Tensor, released: torch.Tensor) -> Optional[str]:
    """Why the values ``ours`` are not distributed as the random
    ``released`` ones (None: they are): std within ``STD_TOLERANCE``
    (relative) and mean within ``MEAN_TOLERANCE`` released std, each
    widened to ``STANDARD_ERRORS`` standard errors of the smaller sample
    where that is more (from 711 values for the std, 3,200 for the mean,
    the tolerances are exactly 15 % and 0.1)."""
    ours, released = ours.double().flatten(), released.double().flatten()
    n = min(ours.numel(), released.numel())
    if n < 2:
        return f'{n} values'
    std_tolerance = max(STD_TOLERANCE, STANDARD_ERRORS / n**0.5)
    mean_tolerance = max(MEAN_TOLERANCE, STANDARD_ERRORS * (2 / n)**0.5)
    std, ref_std = ours.std().item(), released.std().item()
    mean, ref_mean = ours.mean().item(), released.mean().item()
    if abs(std / ref_std - 1) > std_tolerance:
        return f'std {std:.4g}, released {ref_std:.4g} ({n} values)'
    if abs(mean - ref_mean) > mean_tolerance * ref_std:
        return (f'mean {mean:.4g}, released {ref_mean:.4g}, std '
                f'{ref_std:.3g} ({n} values)')
    return None


def compare(build_ours: Callable[[], Tensors],
            build_released: Callable[[], Tensors],
            rules: Rules) -> Dict[str, str]:
    """Build both sides under seeds (the released one once more, to tell
    the tensors that do not depend on the seed) and compare every pair,
    until every pooled role has ``MIN_POOLED`` values; returns
    ``{our tensor or role: what differs}``."""
    torch.manual_seed(12345)
    fixed_reference = build_released()
    problems: Dict[str, str] = {}
    # (role: our name with layer indices as '*', shape) -> values
    pooled: Dict[Tuple[str, torch.Size],
                 Tuple[List[torch.Tensor], List[torch.Tensor]]] = {}
    for seed in range(MAX_SEEDS):
        torch.manual_seed(seed)
        released = build_released()
        torch.manual_seed(1000 + seed)
        ours = build_ours()
        for o, r in pair(ours, released, rules):
            if torch.equal(released[r], fixed_reference[r]):
                if not torch.equal(ours[o].flatten(),
                                   released[r].flatten().to(ours[o].dtype)):
                    problems[o] = ('differs from the released constant '
                                   f'{released[r].flatten()[:3].tolist()}')
            elif released[r].numel() >= ALONE:
                problems.update({o: why for why in
                                 [mismatch(ours[o], released[r])] if why})
            else:
                side = pooled.setdefault(
                    (re.sub(r'\.\d+\.', '.*.', o), ours[o].shape), ([], []))
                side[0].append(ours[o].flatten())
                side[1].append(released[r].flatten())
        if all(sum(map(len, side[0])) >= MIN_POOLED
               for side in pooled.values()):
            break
    shapes: Dict[str, int] = {}
    for name, _ in pooled:
        shapes[name] = shapes.get(name, 0) + 1
    for (name, shape), (values, reference) in pooled.items():
        if shapes[name] > 1:  # e.g. the stem's convolutions
            name = f'{name} {tuple(shape)}'
        if sum(map(len, values)) < MIN_POOLED:
            problems[name] = f'fewer than {MIN_POOLED} values'
        elif why := mismatch(torch.cat(values), torch.cat(reference)):
            problems[name] = why
    return problems


# --- decoders: our names -> released names ------------------------------
MASK_RULES: Rules = [
    (r'cls_emb', 'cls_emb'),
    (r'layers\.(\d+)\.ln(\d)\.(weight|bias)', r'blocks.\1.norm\2.\3'),
    (r'layers\.(\d+)\.attn\.attn\.in_proj_(weight|bias)',
     r'blocks.\1.attn.qkv.\2'),
    (r'layers\.(\d+)\.attn\.attn\.out_proj\.(weight|bias)',
     r'blocks.\1.attn.proj.\2'),
    (r'layers\.(\d+)\.ffn\.layers\.0\.0\.(weight|bias)',
     r'blocks.\1.mlp.fc1.\2'),
    (r'layers\.(\d+)\.ffn\.layers\.1\.(weight|bias)',
     r'blocks.\1.mlp.fc2.\2'),
    (r'dec_proj\.(weight|bias)', r'proj_dec.\1'),
    (r'patch_proj\.weight', 'proj_patch'),
    (r'classes_proj\.weight', 'proj_classes'),
    (r'(decoder_norm|mask_norm)\.(weight|bias)', r'\1.\2'),
]
LINEAR_RULES: Rules = [(r'conv_seg\.(weight|bias)', r'head.\1')]


def frame_rules(norms: Dict[str, str],
                stacks: Dict[str, Tuple[str, Rules]]) -> Rules:
    """Rules for the CBT/DEPICT frame: class embeddings, mask norm, the
    ``norms`` (ours -> released) and the pre-norm layer ``stacks`` (ours
    -> released net and the operator's ``(our suffix, released suffix)``
    pairs)."""
    rules: Rules = [(r'cls_emb', 'cls_emb'),
                    (r'mask_norm\.(weight|bias)', r'mask_norm.\1')]
    rules += [(mine + r'\.(weight|bias)', theirs + r'.\1')
              for mine, theirs in norms.items()]
    for mine, (theirs, operator) in stacks.items():
        rules.append((mine + r'\.(\d+)\.norm\.(weight|bias)',
                      theirs + r'.layers.\1.norm.\2'))
        rules += [(mine + r'\.(\d+)\.attn\.' + suffix,
                   theirs + r'.layers.\1.fn.' + released)
                  for suffix, released in operator]
    return rules


CBT_OPERATOR: Rules = [(r'proj\.weight', 'proj.weight'),
                       (r'eta', 'step_rep'), (r'kappa', 'step_x'),
                       (r'out_proj\.(weight|bias)', r'to_out.\2')]
DEPICT_OPERATOR: Rules = [(r'proj\.weight', 'proj'),
                          (r'step_size', 'step_size')]
TSSA_OPERATOR: Rules = [(r'proj\.weight', 'qkv.weight'), (r'temp', 'temp'),
                        (r'out_proj\.(weight|bias)', r'to_out.0.\2')]
ONE_NORM = dict(decoder_norm='decoder_norm')
# name -> (published config, released decoder from (classes, width,
# subspaces), rules)
DECODERS = {
    'segmenter-mask-t': ('segmenter_vit-t_mask_8xb1-160k_ade20k-512x512',
                         lambda k, d, h: segmenter_mask(k, d), MASK_RULES),
    # d ** -0.5 depends on the width: ViT-S too
    'segmenter-mask-s': ('segmenter_vit-s_mask_8xb1-160k_ade20k-512x512',
                         lambda k, d, h: segmenter_mask(k, d), MASK_RULES),
    'segmenter-linear': ('segmenter_vit-s_linear_8xb1-160k_ade20k-512x512',
                         lambda k, d, h: segmenter_linear(k, d),
                         LINEAR_RULES),
    'cbt': ('cbsa_vit-t_8xb1-160k_ade20k-512x512', cbt_decoder,
            frame_rules(ONE_NORM, dict(layers=('net', CBT_OPERATOR)))),
    # no released CBT-dagger: the released CBT decoder without to_out
    'cbt-dagger': ('cbsa-rigorous_vit-t_8xb1-160k_ade20k-512x512',
                   lambda k, d, h: cbt_decoder(k, d, h, out=False),
                   frame_rules(ONE_NORM, dict(layers=('net', CBT_OPERATOR)))),
    'depict-sa': ('mssa_vit-t_8xb1-160k_ade20k-512x512',
                  lambda k, d, h: depict_decoder(k, d, h, 'sa'),
                  frame_rules(ONE_NORM,
                              dict(layers=('net', DEPICT_OPERATOR)))),
    'depict-ca': ('mssa-ca_vit-t_8xb1-160k_ade20k-512x512',
                  lambda k, d, h: depict_decoder(k, d, h, 'ca'),
                  frame_rules(dict(decoder_norm='snorm', class_norm='cnorm'),
                              dict(layers=('snet', DEPICT_OPERATOR),
                                   cross_layers=('cnet', DEPICT_OPERATOR)))),
    'tssa': ('tssa_vit-t_8xb1-160k_ade20k-512x512', tssa_decoder,
             frame_rules(ONE_NORM, dict(layers=('net', TSSA_OPERATOR)))),
}


def decoder_case(name: str, head_type: Optional[str] = None
                 ) -> Tuple[Callable[[], Tensors], Callable[[], Tensors],
                            Rules]:
    """The published head of ``name`` (or it as ``head_type``) and its
    released counterpart, as builders for :func:`compare`."""
    config, released, rules = DECODERS[name]
    head = load_config(config).model.decode_head
    if head_type:
        head.type = head_type
    sizes = (head.num_classes, head.in_channels,
             head.get('attn_cfg', {}).get('num_heads', 0))
    return (lambda: named_tensors(built(head)),
            lambda: named_tensors(released(*sizes)), rules)


@pytest.mark.parametrize('name', list(DECODERS))
def test_decoder_starts_as_released(name):
    problems = compare(*decoder_case(name))
    assert not problems, problems


def test_mmseg_mask_head_does_not_start_as_released():
    """Sensitivity: mmseg's own head under the published ViT-T config
    differs exactly where its init_weights differs from the released one
    (the issue's std 0.020 projections, xavier-uniform qkv)."""
    problems = compare(*decoder_case('segmenter-mask-t',
                                     'SegmenterMaskTransformerHead'))
    assert set(problems) == {
        'patch_proj.weight', 'classes_proj.weight',
        'layers.0.attn.attn.in_proj_weight',
        'layers.1.attn.attn.in_proj_weight'}, problems
    std = float(re.match(r'std ([\d.]+),', problems['patch_proj.weight'])[1])
    assert std == pytest.approx(0.02, rel=0.01)


def test_mmseg_linear_head_does_not_start_as_released():
    """Sensitivity: the linear config without its init_cfg (mmseg's N(0,
    0.01) for conv_seg) fails."""
    config, released, rules = DECODERS['segmenter-linear']
    head = load_config(config).model.decode_head
    del head.init_cfg
    problems = compare(lambda: named_tensors(built(head)),
                       lambda: named_tensors(released(150, 384, 0)), rules)
    assert set(problems) == {'conv_seg.weight'}, problems


def test_runner_initialisation_loads_the_encoder_and_keeps_mmseg_keys(
        tmp_path):
    """The published ViT-T mask config built whole and initialised as
    mmengine's runner does (``Runner._init_model_weights``:
    ``model.init_weights()``; one encoder layer): the encoder takes its
    pretrained file (``model.pretrained``) unchanged, the head draws the
    released projections, and the head's state-dict keys and shapes are
    mmseg's ``SegmenterMaskTransformerHead``'s, whose weights it loads
    strictly (mmseg's and converted checkpoints)."""
    import mmseg_whitebox  # noqa: F401
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    model_cfg = load_config(
        'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512').model
    model_cfg.backbone.num_layers = 1
    torch.manual_seed(0)
    state = {k: torch.randn_like(v) for k, v in
             MODELS.build(model_cfg.backbone).state_dict().items()}
    torch.save({'state_dict': state}, tmp_path / 'vit.pth')
    model_cfg.pretrained = str(tmp_path / 'vit.pth')
    model = MODELS.build(model_cfg)
    model.init_weights()
    for key, value in model.backbone.state_dict().items():
        assert torch.equal(value, state[key]), key
    head = model.decode_head
    assert type(head).__name__ == 'SegmenterMaskTransformerHeadReleasedInit'
    assert mismatch(head.patch_proj.weight,
                    192**-0.5 * torch.randn(192, 192)) is None
    mmseg_head = MODELS.build(dict(model_cfg.decode_head,
                                   type='SegmenterMaskTransformerHead'))
    assert {k: v.shape for k, v in head.state_dict().items()} == {
        k: v.shape for k, v in mmseg_head.state_dict().items()}
    head.load_state_dict(mmseg_head.state_dict(), strict=True)


def test_comparison_rejects_what_the_issue_found():
    """Sensitivity of the comparison itself: std 0.02 where the released
    draws 0.072 (ViT-T's d ** -0.5), a mean shifted by 0.2 std, a 16 %
    wider draw; N(0, 1) step sizes against a constant 1 or 0.02 N(0, 1)
    at the pooled minimum; the same draw at another seed passes."""
    torch.manual_seed(0)
    released = 192**-0.5 * torch.randn(192, 192)
    assert mismatch(0.02 * torch.randn(192, 192), released)
    assert mismatch(192**-0.5 * (torch.randn(192, 192) + 0.2), released)
    assert mismatch(1.16 * 192**-0.5 * torch.randn(192, 192), released)
    assert mismatch(192**-0.5 * torch.randn(192, 192), released) is None
    steps = torch.randn(MIN_POOLED)
    assert mismatch(torch.ones(MIN_POOLED), steps)
    assert mismatch(0.02 * torch.randn(MIN_POOLED), steps)
    assert mismatch(torch.randn(MIN_POOLED), steps) is None


def test_constants_must_be_equal_exactly():
    """Sensitivity: a bias drawn N(0, 1e-6) (mmseg's ViT draws its FFN
    biases so) where the released one is zero."""
    def linear(bias_std):
        module = nn.Linear(64, 64)
        if bias_std:
            nn.init.normal_(module.bias, std=bias_std)
        else:
            nn.init.zeros_(module.bias)
        return named_tensors(module)

    problems = compare(lambda: linear(1e-6), lambda: linear(0.0),
                       [(r'(weight|bias)', r'\1')])
    assert set(problems) == {'bias'}, problems


# --- encoders trained from scratch --------------------------------------
def white_box_rules(kind: str) -> Rules:
    """WhiteBoxViT names -> the released encoder's (``kind``: 'crate',
    'cbt' -- both ``transformer.layers.<i>.{0,1}`` -- or 'tost')."""
    final = 'norm' if kind == 'tost' else 'mlp_head.0'
    rules: Rules = [(r'cls_token', 'cls_token'),
                    (r'ln1\.(weight|bias)', final + r'.\1')]
    if kind == 'tost':
        return rules + [
            (r'pos_embed', 'frame.pos_embed'),
            (r'patch_embed\.projection\.weight', 'frame.proj.weight'),
            (r'layers\.(\d+)\.norm(2?)\.(weight|bias)',
             lambda m: f'blocks.{m[1]}.norm{m[2] or 1}.{m[3]}'),
            (r'layers\.(\d+)\.attn\.proj\.(weight|bias)',
             r'blocks.\1.attn.qkv.\2'),
            (r'layers\.(\d+)\.attn\.temp', r'blocks.\1.attn.temp'),
            (r'layers\.(\d+)\.attn\.out_proj\.(weight|bias)',
             r'blocks.\1.attn.to_out.0.\2'),
            (r'layers\.(\d+)\.ffn\.layers\.0\.0\.(weight|bias)',
             r'blocks.\1.mlp.fc1.\2'),
            (r'layers\.(\d+)\.ffn\.layers\.1\.(weight|bias)',
             r'blocks.\1.mlp.fc2.\2')]
    attn = r'transformer.layers.\1.0.fn.'
    operator = ([(r'proj\.weight', 'qkv.weight'),
                 (r'out_proj\.(weight|bias)', r'to_out.0.\2')]
                if kind == 'crate' else CBT_OPERATOR)
    rules += [(r'pos_embed', 'pos_embedding'),
              (r'layers\.(\d+)\.norm\.(weight|bias)',
               r'transformer.layers.\1.0.norm.\2'),
              (r'layers\.(\d+)\.norm2\.(weight|bias)',
               r'transformer.layers.\1.1.norm.\2'),
              (r'layers\.(\d+)\.ffn\.weight',
               r'transformer.layers.\1.1.fn.weight')]
    rules += [(r'layers\.(\d+)\.attn\.' + mine, attn + released)
              for mine, released in operator]
    # the frame's linear patch embedding: CRATE's Linear on flattened
    # patches (same fan-in), else the Segmenter ViT's convolution
    rules.append((r'patch_embed\.projection\.weight',
                  'to_patch_embedding.2.weight' if kind == 'crate'
                  else 'frame.proj.weight'))
    # the published stems (stem_cfg)
    rules += [(r'patch_embed\.layers\.(\d)\.conv\.weight',
               lambda m: f'to_patch_embedding.proj.{2 * int(m[1])}.0.weight'),
              (r'patch_embed\.layers\.(\d)\.bn\.(\w+)',
               lambda m: f'to_patch_embedding.proj.{2 * int(m[1])}.1.{m[2]}'),
              (r'patch_embed\.pre_norm\.(weight|bias)',
               r'to_patch_embedding.1.\1'),
              (r'patch_embed\.projection\.bias', 'to_patch_embedding.2.bias'),
              (r'patch_embed\.norm\.(weight|bias)',
               r'to_patch_embedding.3.\1')]
    return rules


GRID = 32  # 512 crops, patch 16
# name -> (published config, stem, released encoder, released tensors the
# project's frame does not have)
ENCODERS = {
    'cbt-t': ('cbsa_cbt-t_8xb1-160k_ade20k-512x512', None,
              lambda: cbt_encoder(192, 3, 64, GRID), 'cbt',
              r'to_patch_embedding\..*|frame\.pos_embed'),
    'cbt-t-stem': ('cbsa_cbt-t_8xb1-160k_ade20k-512x512', 'cbt_stem',
                   lambda: cbt_encoder(192, 3, 64, GRID), 'cbt', None),
    'crate-t': ('cbsa_crate-t_8xb1-160k_ade20k-512x512', None,
                lambda: crate_encoder(384, 6, 64, GRID), 'crate',
                r'to_patch_embedding\.(1|3)\..*|to_patch_embedding\.2\.bias'),
    'crate-t-stem': ('cbsa_crate-t_8xb1-160k_ade20k-512x512', 'crate_stem',
                     lambda: crate_encoder(384, 6, 64, GRID), 'crate', None),
    'tost-t': ('cbsa_tost-t_8xb1-160k_ade20k-512x512', None,
               lambda: tost_encoder(192, 4, GRID), 'tost', None),
}
STEM_PARTS = r'patch_embed\..*|cls_token|pos_embed'


def encoder_case(name: str, weight_init: Optional[str] = None
                 ) -> Tuple[Callable[[], Tensors], Callable[[], Tensors],
                            Rules]:
    """The published backbone of ``name`` (or it with ``weight_init``)
    and its released counterpart, as builders for :func:`compare`;
    ``*-stem``: with the published stem of ``stem_cfg``, of which the
    stem, CLS token and positions are compared (the layers are those of
    the case without)."""
    config, stem, released, kind, absent = ENCODERS[name]
    cfg = load_config(config)
    assert cfg.model.pretrained is None
    backbone = cfg.model.backbone
    assert backbone.get('init_cfg') is None
    if stem:
        backbone.stem_cfg = cfg[stem]
    if weight_init:
        backbone.weight_init = weight_init
    keep = (r'to_patch_embedding\..*|cls_token|pos_embedding' if stem else
            None)

    def ours():
        tensors = named_tensors(built(backbone))
        return {k: v for k, v in tensors.items()
                if not stem or re.fullmatch(STEM_PARTS, k)}

    def theirs():
        return {k: v for k, v in released().items()
                if (re.fullmatch(keep, k) if keep else
                    not (absent and re.fullmatch(absent, k)))}

    return ours, theirs, white_box_rules(kind)


@pytest.mark.parametrize('name', list(ENCODERS))
def test_encoder_trained_from_scratch_starts_as_released(name):
    """The published from-scratch encoders (``pretrained=None``, no
    ``init_cfg``) at ViT-T widths, all 12 layers."""
    problems = compare(*encoder_case(name))
    assert not problems, problems


@pytest.mark.parametrize('name,expected', [
    ('crate-t', {'pos_embed', 'cls_token', 'patch_embed.projection.weight',
                 'layers.0.attn.proj.weight', 'layers.*.attn.out_proj.bias',
                 'layers.0.ffn.weight'}),
    ('tost-t', {'patch_embed.projection.weight',
                'layers.0.ffn.layers.0.0.bias'}),
])
def test_former_initialisation_is_not_the_released_one(name, expected,
                                                       monkeypatch):
    """Sensitivity: the same encoders as this project initialised them
    before: mmseg's ViT initialisation (``weight_init='mmseg'``:
    trunc-normal 0.02 tokens and Linear layers, kaiming-normal patch
    convolution, N(0, 1e-6) FFN biases) and ISTA dictionaries
    ``kaiming_uniform_(a=sqrt(5))`` (std 1 / sqrt(3 d) instead of
    sqrt(2 / d))."""
    from mmseg_whitebox.ops import ISTA
    monkeypatch.setattr(ISTA, 'reset_parameters', lambda self: nn.init.
                        kaiming_uniform_(self.weight, a=5**0.5))
    problems = compare(*encoder_case(name, 'mmseg'))
    assert expected <= set(problems), problems


def test_hybrid_encoder_takes_its_parts_initialisation():
    """CRATE+CBT has no released factory; its layers are the CBT
    repository's MSSA and CBSA layers, which that repository's
    ``VisionTransformer`` builds at PyTorch's defaults
    (CBSA_image_classification/models.py:127-160, 300-311): the same
    initialisation as CBT-T, compared above."""
    for size in 'ts':
        cfg = load_config(f'cbsa_crate-cbt-{size}_8xb1-160k_ade20k-512x512')
        assert cfg.model.pretrained is None
        assert cfg.model.backbone.weight_init == 'pytorch'
