"""Mixed precision stays finite: the white-box operators, every published
decode head and the white-box encoders under CPU autocast in bfloat16 and
float16.

Operators: outputs and input gradients under autocast against float32 on
ordinary inputs, and finite on inputs that overflow float16 (features of
~1e3, sums over many tokens). CBSA's token-by-representative similarities
and TSSA's token statistics are computed in float32 under a float16
autocast (``mmseg_whitebox/ops/precision.py``); with that disabled (a
monkeypatch) the same inputs give NaN. The operators built on
``F.scaled_dot_product_attention`` need no such step: on the same inputs
the plain float16 similarities overflow, the fused kernel does not.

Models: a few training steps of each published config (shrunk: 1-2
encoder layers, 6 classes, 64x64 images, small grids of representatives)
with mmengine's ``AmpOptimWrapper`` and its dynamic loss scaler, the
optimizer wrapper ``tools/train.py --amp [--amp-dtype]`` configures
(:func:`mmseg_whitebox.utils.amp.enable_amp`), from the same weights as
float32: at every step the loss and the unscaled gradients against float32
at the same weights, every operator's output finite.
"""
import contextlib
import copy
import functools
import logging
import os.path as osp
import warnings
from typing import Dict, List, Tuple
from unittest import mock

import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.optim import AmpOptimWrapper, OptimWrapper, build_optim_wrapper
from mmengine.optim.optimizer import amp_optimizer_wrapper
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData

from mmseg_whitebox.ops import (CBSA, ISTA, MHSA, MSSA, QKVCBSA, TSSA, MiTA,
                                CrossMSSA, precision)
from mmseg_whitebox.utils import capabilities
from mmseg_whitebox.utils.amp import amp_device_problem, enable_amp
from mmseg_whitebox.utils.tool_error import ToolError

from _helpers import REPO, skip_without_cpu_autocast
from reference_ops import softmax_attention

DTYPES = (torch.bfloat16, torch.float16)
FLOAT16_MAX = torch.finfo(torch.float16).max  # 65504

# ------------------------------------------------------------- tolerances
# Operators on ordinary inputs (N(0, 1) tokens): relative error (norm of
# the difference / norm of the float32 result) of the output, and of the
# gradient of a fixed random projection of it with respect to the input.
# Measured on this machine: outputs <= 4.9e-3 (bfloat16, 8 significant
# bits), <= 5.8e-4 (float16, 11 bits); gradients <= 7.1e-3 / 7.0e-4, but
# ISTA's 5.0e-2 / 9.1e-3 (tokens within rounding of its ReLU threshold
# switch side)
OUT_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
GRAD_TOL = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3}
ISTA_GRAD_TOL = {torch.bfloat16: 0.1, torch.float16: 3e-2}
# Inputs that overflow float16, with the float32 statistics: CBSA's output
# within 2e-3 of float32 (measured 5.7e-4); TSSA's within 1e-2 where only
# its sums over the tokens overflow (measured 2.9e-3; without the float32
# statistics 9.7e-2: the memberships are lost), within 5e-2 where the
# coordinates themselves do (measured 3.2e-2: its per-direction rescaling,
# folded into the projection back, falls into float16's subnormal range)
PROVOKED_TOL = {'cbsa': 2e-3, 'cbsa-tied': 2e-3, 'tssa': 5e-2, 'mita': 2e-3}
TSSA_SUMS_TOL = 1e-2
# Training steps, float32 at the same weights at every step: the loss
# (measured <= 1.1e-3 bfloat16, <= 6.9e-5 float16; DEPICT-CA the largest)
# and the unscaled gradients of all parameters together (measured <= 0.17
# bfloat16, <= 1.7e-2 float16: gradients in bfloat16 carry 8 significant
# bits, and the LayerNorm over nearly equal class similarities amplifies
# their rounding)
STEP_LOSS_TOL = {torch.bfloat16: 3e-3, torch.float16: 2e-4}
STEP_GRAD_TOL = {torch.bfloat16: 0.3, torch.float16: 4e-2}
STEPS = 3


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


# small CPU steps run fastest and steadiest on one thread (conftest.py)
pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture
def no_float32_statistics(monkeypatch):
    """The operators as they would be without their float32 statistics."""
    monkeypatch.setattr(precision, 'float16_autocast', lambda x: False)


# ------------------------------------------------------------- operators
D = 96


OPERATORS = {
    'cbsa': lambda: CBSA(D, 3, 32, rep_grid=(4, 4)),
    'cbsa-tied': lambda: CBSA(D, 3, 32, rep_grid=(4, 4), out_proj='tied'),
    'qkv-cbsa': lambda: QKVCBSA(D, 3, 32, rep_grid=(4, 4)),
    'mssa': lambda: MSSA(D, 3, 32),
    'mssa-linear': lambda: MSSA(D, 3, 32, out_proj='linear',
                                basis_init='trunc_normal', step_size=False),
    'cross-mssa': lambda: CrossMSSA(D, 3, 32),
    'tssa': lambda: TSSA(D, 3, 32, proj_bias=True),
    'mhsa': lambda: MHSA(D, 3),
    'ista': lambda: ISTA(D),
    'mita': lambda: MiTA(D, 3, 32, pool_size=3),
}
GRID_OPERATORS = ('cbsa', 'cbsa-tied', 'qkv-cbsa', 'mita')


def op_result(name: str, op: torch.nn.Module, x: torch.Tensor,
              dtype=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The operator's output on ``x`` (under autocast in ``dtype``) and the
    gradient with respect to ``x`` of a fixed random projection of it."""
    if dtype is not None:
        skip_without_cpu_autocast(dtype)
    x = x.clone().requires_grad_(True)
    kwargs = dict(hw=(int(x.shape[1]**0.5),) * 2) \
        if name in GRID_OPERATORS else {}
    with (torch.autocast('cpu', dtype=dtype) if dtype is not None
          else contextlib.nullcontext()):
        if name == 'cross-mssa':  # class-like queries: the first 8 tokens
            out = op(x[:, :8], x)
        else:
            out = op(x, **kwargs)
    weights = torch.randn(out.shape,
                          generator=torch.Generator().manual_seed(1))
    (out.float() * weights).sum().backward()
    return out.detach().float(), x.grad


def tokens(n: int, scale: float) -> torch.Tensor:
    return torch.randn(2, n, D,
                       generator=torch.Generator().manual_seed(0)) * scale


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
@pytest.mark.parametrize('name', OPERATORS)
def test_operator_under_autocast_follows_float32(name, dtype):
    if name == 'mita' and dtype == torch.bfloat16:
        pytest.skip('MiTA routes each query to one landmark and each '
                    "landmark to its top-k keys: bfloat16's rounding moves "
                    'a few to other keys, a jump no float32 tolerance '
                    'follows (tests/test_mita.py bounds it)')
    torch.manual_seed(0)
    op = OPERATORS[name]()
    x = tokens(64, 1.0)
    out32, grad32 = op_result(name, op, x)
    op.zero_grad()
    out, grad = op_result(name, op, x, dtype)
    grad_tol = (ISTA_GRAD_TOL if name == 'ista' else GRAD_TOL)[dtype]
    assert relative_error(out, out32) <= OUT_TOL[dtype]
    assert relative_error(grad, grad32) <= grad_tol
    # sensitivity: a 2% change of the output or 20% of the gradient is
    # outside the tolerances
    assert relative_error(out * 1.02, out32) > OUT_TOL[dtype]
    assert relative_error(grad * 1.2, grad32) > grad_tol


#: inputs that overflow float16 somewhere in the operator: (scale, tokens)
PROVOKING = {
    # similarities ~1e5 (coordinates ~200)
    'cbsa': (1e3, 64),
    'cbsa-tied': (1e3, 64),
    # squares of the coordinates and their sums over the tokens
    'tssa': (1e3, 64),
    # query-key products ~1e5 (the routed and the shared expert's logits)
    'mita': (1e3, 64),
}


@pytest.mark.parametrize('name', PROVOKING)
def test_float32_statistics_keep_float16_finite(name):
    scale, n = PROVOKING[name]
    torch.manual_seed(0)
    op = OPERATORS[name]()
    x = tokens(n, scale)
    out32, _ = op_result(name, op, x)
    op.zero_grad()
    out, grad = op_result(name, op, x, torch.float16)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert relative_error(out, out32) <= PROVOKED_TOL[name]
    # bfloat16 has float32's range: finite without any float32 step
    out, grad = op_result(name, op, x, torch.bfloat16)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()


@pytest.mark.parametrize('name', PROVOKING)
def test_without_float32_statistics_float16_overflows(
        name, no_float32_statistics):
    """Sensitivity: the same inputs give NaN in float16 without the
    float32 statistics."""
    scale, n = PROVOKING[name]
    torch.manual_seed(0)
    out, grad = op_result(name, OPERATORS[name](), tokens(n, scale),
                          torch.float16)
    assert not torch.isfinite(out).all()


def test_tssa_sums_over_many_tokens_keep_their_memberships(monkeypatch):
    """Coordinates of ~200 stay below 65504 squared, their sums over 64
    tokens do not: without the float32 statistics the normalised energies
    are lost (1/inf = 0) silently, with them TSSA follows float32."""
    skip_without_cpu_autocast(torch.float16)
    torch.manual_seed(0)
    op = OPERATORS['tssa']()
    x = tokens(64, 300.0)
    w = op.proj(x)
    assert w.abs().max() < FLOAT16_MAX**0.5 < w.square().sum(1).max()
    out32, _ = op_result('tssa', op, x)
    out, grad = op_result('tssa', op, x, torch.float16)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert relative_error(out, out32) <= TSSA_SUMS_TOL
    monkeypatch.setattr(precision, 'float16_autocast', lambda x: False)
    out, _ = op_result('tssa', op, x, torch.float16)
    assert torch.isfinite(out).all()
    assert relative_error(out, out32) > TSSA_SUMS_TOL


@pytest.mark.parametrize('dtype', [None, torch.bfloat16, torch.float16],
                         ids=str)
@pytest.mark.parametrize('name', PROVOKING)
def test_float32_statistics_only_under_float16(name, dtype, monkeypatch):
    """Without autocast and under bfloat16 the operators compute exactly
    as they would without the float32 step (bitwise); under float16 they
    do not (the sensitivity of the comparison)."""
    torch.manual_seed(0)
    op = OPERATORS[name]()
    x = tokens(64, 1.0)
    out, grad = op_result(name, op, x, dtype)
    op.zero_grad()
    monkeypatch.setattr(precision, 'float16_autocast', lambda x: False)
    plain_out, plain_grad = op_result(name, op, x, dtype)
    same = torch.equal(out, plain_out) and torch.equal(grad, plain_grad)
    assert same == (dtype != torch.float16)


@pytest.mark.parametrize('name', ['mssa', 'cross-mssa', 'mhsa', 'qkv-cbsa',
                                  'ista'])
def test_fused_attention_needs_no_float32_step(name):
    """On inputs whose plain float16 similarities overflow, the operators
    built on ``F.scaled_dot_product_attention`` (its fused CPU kernel
    accumulates in float32), and ISTA (no statistics), stay finite."""
    torch.manual_seed(0)
    op = OPERATORS[name]()
    x = tokens(64, 1e3)
    out, grad = op_result(name, op, x, torch.float16)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    if name == 'ista':
        return
    # sensitivity: the same queries and keys, softmax(q k^T) written out
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.float16):
        if isinstance(op, MSSA):
            q = k = op.project(x)
        else:
            q, k, _ = op.project(x)
        plain, _ = softmax_attention(q, k, k, op.scale)
    assert not torch.isfinite(plain).all()


# ---------------------------------------------------------------- models
class CPUAmpOptimWrapper(AmpOptimWrapper):
    """mmengine's ``AmpOptimWrapper`` on a CPU. mmengine 0.10.7 asserts an
    accelerator in ``AmpOptimWrapper.__init__``
    (``optim/optimizer/amp_optimizer_wrapper.py``), builds
    ``torch.cuda.amp.GradScaler``, which disables itself without CUDA (no
    scaling, no skipped steps), and its ``autocast`` takes only bfloat16 on
    a CPU (``runner/amp.py``). This lifts the assertion, scales with
    ``torch.amp.GradScaler('cpu')`` (the same defaults: 2**16, halved on
    a non-finite gradient) and autocasts on the CPU in the configured
    dtype; backward, unscaling, skipping and stepping are mmengine's."""

    def __init__(self, **kwargs) -> None:
        assert kwargs.get('loss_scale') == 'dynamic'
        with mock.patch.object(amp_optimizer_wrapper, 'is_cuda_available',
                               return_value=True), warnings.catch_warnings():
            warnings.simplefilter('ignore')  # the CUDA scaler, replaced
            super().__init__(**kwargs)
        self.loss_scaler = torch.amp.GradScaler('cpu')

    @contextlib.contextmanager
    def optim_context(self, model: torch.nn.Module):
        with OptimWrapper.optim_context(self, model), torch.autocast(
                'cpu', dtype=self.cast_dtype):
            yield


def config_path(name: str) -> str:
    return osp.join(REPO, 'configs', name.split('_')[0].split('-')[0],
                    name + '_8xb1-160k_ade20k-512x512.py')


#: config name -> encoder layers: every published decode head on the ViT,
#: and the white-box encoders (CBT, CRATE, ToST, CBSA-adapted ViT) under
#: the CBSA and Segmenter heads (CRATE+CBT's layers are CRATE's and CBT's)
MODELS = {
    'cbsa_vit-t': 1,
    'cbsa-rigorous_vit-t': 1,
    'mssa_vit-t': 1,
    'mssa-ca_vit-t': 1,
    'tssa_vit-t': 1,
    'segmenter_vit-t_mask': 1,
    'segmenter_vit-s_linear': 1,
    'cbsa_cbt-t': 2,
    'cbsa_crate-t': 2,
    'cbsa_tost-t': 2,
    'segmenter_cbsa-vit-t_mask': 2,
}
IMAGE = (64, 64)  # a 4x4 token grid
GRID = (2, 2)  # representatives, wherever a config has a grid


def tiny_config(name: str) -> Config:
    """A copy of :func:`_tiny_config` (read once)."""
    return copy.deepcopy(_tiny_config(name))


@functools.lru_cache(maxsize=None)
def _tiny_config(name: str) -> Config:
    """The published config with no pretrained weights, ``MODELS[name]``
    encoder layers, 6 classes, no dropout or drop path, ``GRID``
    representatives, 64x64 images and ViT-T's width (Segmenter's linear
    head is published on ViT-S only); everything else as published."""
    cfg = Config.fromfile(config_path(name))
    cfg.model.pretrained = None
    backbone = cfg.model.backbone
    layers = MODELS[name]
    backbone.update(drop_path_rate=0.0, num_layers=layers, init_cfg=None)
    if 'rep_grid' in backbone.get('attn_cfg', {}):
        backbone.attn_cfg.rep_grid = GRID
    head = cfg.model.decode_head
    if backbone.embed_dims != 192:
        backbone.update(embed_dims=192, num_heads=3)
        head.update(in_channels=192, channels=192)
    head.num_classes = 6
    for key in ('drop_rate', 'attn_drop_rate', 'drop_path_rate'):
        if key in head:
            head[key] = 0.0
    if 'rep_grid' in head.get('attn_cfg', {}):
        head.attn_cfg.rep_grid = GRID
    cfg.model.data_preprocessor.size = IMAGE
    return cfg


def fixed_batch() -> dict:
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 3) + IMAGE, generator=gen,
                           dtype=torch.uint8)
    labels = torch.randint(0, 6, (2, ) + IMAGE, generator=gen)
    samples = []
    for label in labels:
        sample = SegDataSample()
        sample.gt_sem_seg = PixelData(data=label[None].clone())
        samples.append(sample)
    return dict(inputs=list(images), data_samples=samples)


@functools.lru_cache(maxsize=None)
def initial_model(name: str) -> torch.nn.Module:
    """The tiny config's model as the runner initialises it (seed 0)."""
    from mmseg.registry import MODELS as REGISTRY
    init_default_scope('mmseg')
    MMLogger.get_current_instance().setLevel(logging.ERROR)
    torch.manual_seed(0)
    model = REGISTRY.build(tiny_config(name).model)
    model.init_weights()
    return model.train()


def loss_and_grads(model: torch.nn.Module, data: dict
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The float32 training loss and gradients of ``model`` on ``data``."""
    model.zero_grad()
    inputs = model.data_preprocessor(data, True)
    loss, _ = model.parse_losses(model._run_forward(inputs, mode='loss'))
    loss.backward()
    grads = flat_grads(model)
    model.zero_grad()
    return loss.detach(), grads


def flat_grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()
                      if p.grad is not None])


WHITE_BOX_OPS = (CBSA, QKVCBSA, MSSA, TSSA, MHSA, ISTA)


def amp_steps(name: str, dtype: torch.dtype, steps: int = STEPS,
              bases_gain: float = 1.0) -> Tuple[List[Dict], List[str]]:
    """``steps`` steps of the tiny ``name`` model with the optimizer wrapper
    ``enable_amp`` configures (run on the CPU), the decode head's bases
    multiplied by ``bases_gain``. At each step: the loss, the unscaled
    gradients, what float32 gives at the same weights, and whether the
    loss scaler took the step; and the white-box operators whose output
    was not finite."""
    skip_without_cpu_autocast(dtype)
    if not hasattr(torch.amp, 'GradScaler'):
        pytest.skip(f'torch {torch.__version__} has no CPU loss scaler '
                    '(torch.amp.GradScaler)')
    cfg = tiny_config(name)
    enable_amp(cfg, str(dtype).removeprefix('torch.'))
    model = copy.deepcopy(initial_model(name))
    if bases_gain != 1.0:
        with torch.no_grad():
            for layer in model.decode_head.layers:
                layer.attn.proj.weight.mul_(bases_gain)
    wrapper = build_optim_wrapper(
        model, dict(cfg.optim_wrapper, type=CPUAmpOptimWrapper))
    assert wrapper.cast_dtype == dtype
    data = fixed_batch()
    overflowing: List[str] = []
    hooks = [
        module.register_forward_hook(
            lambda mod, args, out, name=name: overflowing.append(name)
            if not torch.isfinite(out).all() else None)
        for name, module in model.named_modules()
        if isinstance(module, WHITE_BOX_OPS)
    ]
    records = []
    for _ in range(steps):
        # float32 at the same weights (no dropout, no batch statistics:
        # this pass changes nothing the step below sees)
        loss32, grads32 = loss_and_grads(model, data)
        with wrapper.optim_context(model):  # what model.train_step does
            inputs = model.data_preprocessor(data, True)
            losses = model._run_forward(inputs, mode='loss')
        loss, _ = model.parse_losses(losses)
        wrapper.backward(loss)
        scale = wrapper.loss_scaler.get_scale()
        grads = flat_grads(model) / scale
        wrapper.step()  # unscale, skip if not finite, update the scale
        wrapper.zero_grad()
        records.append(dict(
            loss=loss.detach(), loss32=loss32, grads=grads, grads32=grads32,
            taken=wrapper.loss_scaler.get_scale() == scale, scale=scale))
    for hook in hooks:
        hook.remove()
    return records, overflowing


def loss_error(rec: Dict) -> float:
    return float(abs(rec['loss'] - rec['loss32']) / abs(rec['loss32']))


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
@pytest.mark.parametrize('name', MODELS)
def test_training_steps_under_autocast_follow_float32(name, dtype):
    records, overflowing = amp_steps(name, dtype)
    assert overflowing == []
    for i, rec in enumerate(records):
        assert torch.isfinite(rec['loss'])
        assert loss_error(rec) <= STEP_LOSS_TOL[dtype], i
        if rec['taken']:
            assert torch.isfinite(rec['grads']).all()
            assert relative_error(rec['grads'], rec['grads32']) <= \
                STEP_GRAD_TOL[dtype], i
        else:
            # the dynamic loss scaler skips a step whose scaled float16
            # gradients overflow and halves its scale: allowed at the
            # first step only (at 2**16, its initial scale)
            assert dtype == torch.float16 and i == 0, (i, rec['scale'])
    # sensitivity: a 1% change of the loss, and gradients left scaled by
    # the loss scale, are outside the tolerances
    rec = records[-1]
    assert loss_error(dict(rec, loss=rec['loss'] * 1.01)) > \
        STEP_LOSS_TOL[dtype]
    assert relative_error(rec['grads'] * rec['scale'], rec['grads32']) > \
        STEP_GRAD_TOL[dtype]


#: the CBSA head's bases 1000 times their initial std (subspace
#: coordinates ~300, similarities ~1e5)
LARGE_BASES = 1000.0


def test_large_bases_train_with_float32_similarities():
    """A float16 training step of the CBSA head whose similarities exceed
    65504: finite, and within the float16 tolerance of float32."""
    (rec, ), overflowing = amp_steps('cbsa_vit-t', torch.float16, steps=1,
                                     bases_gain=LARGE_BASES)
    assert overflowing == []
    assert loss_error(rec) <= STEP_LOSS_TOL[torch.float16]


def test_large_bases_overflow_without_float32_similarities(
        no_float32_statistics):
    """Sensitivity: the same step without the float32 similarities gives
    NaN attention and a NaN loss."""
    (rec, ), overflowing = amp_steps('cbsa_vit-t', torch.float16, steps=1,
                                     bases_gain=LARGE_BASES)
    assert overflowing and all('decode_head' in n for n in overflowing)
    assert not torch.isfinite(rec['loss'])


# ------------------------------------------------------- the --amp path
def test_enable_amp_configures_mmengine_amp_optim_wrapper():
    cfg = Config.fromfile(config_path('cbsa_vit-t'))
    enable_amp(cfg)  # --amp: mmseg's float16 with a dynamic loss scale
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper'
    assert cfg.optim_wrapper.loss_scale == 'dynamic'
    assert cfg.optim_wrapper.dtype == 'float16'
    assert cfg.optim_wrapper.optimizer.type == 'SGD'  # the rest kept
    cfg = Config.fromfile(config_path('cbsa_vit-t'))
    enable_amp(cfg, 'bfloat16')  # --amp-dtype bfloat16
    assert (cfg.optim_wrapper.type, cfg.optim_wrapper.dtype) == (
        'AmpOptimWrapper', 'bfloat16')
    # a config with AMP already keeps its settings but for a given dtype
    cfg.optim_wrapper.loss_scale = 512.0
    enable_amp(cfg)
    assert (cfg.optim_wrapper.dtype, cfg.optim_wrapper.loss_scale) == (
        'bfloat16', 512.0)
    enable_amp(cfg, 'float16')
    assert cfg.optim_wrapper.dtype == 'float16'
    cfg.optim_wrapper.type = 'ApexOptimWrapper'
    with pytest.raises(ToolError, match='OptimWrapper, not ApexOptim'):
        enable_amp(cfg)
    with pytest.raises(ToolError, match='one of'):
        enable_amp(cfg, 'float8')


def test_autocast_problem_names_what_this_torch_refuses():
    assert precision.autocast_problem('cpu', torch.bfloat16) is None
    problem = precision.autocast_problem('cpu', torch.float16)
    if problem is None:  # this torch autocasts the CPU in float16
        with torch.autocast('cpu', dtype=torch.float16):
            assert torch.ones(2, 2).mm(torch.ones(2, 2)).dtype == \
                torch.float16
    else:
        assert torch.__version__ in problem and 'bfloat16' in problem


def test_amp_device_problem(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert 'needs a CUDA GPU' in amp_device_problem('bfloat16')
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda: False)
    assert amp_device_problem('float16') is None
    assert 'no bfloat16' in amp_device_problem('bfloat16')
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda: True)
    assert amp_device_problem('bfloat16') is None


@pytest.mark.parametrize('pre_2_4', [False, True], ids=['torch', 'pre-2.4'])
def test_autocast_query_on_every_torch(pre_2_4, monkeypatch):
    """The operators' autocast query answers the same through torch 2.4's
    ``get_autocast_dtype`` and through the CPU/CUDA function pairs of
    torch 2.1-2.3 (the latter forced here where torch has both; the
    legacy stack runs it for real)."""
    if pre_2_4:
        if not hasattr(torch, 'is_autocast_cpu_enabled'):
            pytest.skip('this torch no longer has the pre-2.4 queries')
        monkeypatch.setattr(capabilities, 'AUTOCAST_DEVICE_QUERIES', False)
        warnings.filterwarnings('ignore', category=FutureWarning)
    elif not capabilities.AUTOCAST_DEVICE_QUERIES:
        pytest.skip(f'torch {torch.__version__} has no get_autocast_dtype')
    assert precision.autocast_dtype('cpu') is None
    for dtype in (torch.bfloat16, torch.float16):
        if precision.autocast_problem('cpu', dtype):
            continue  # torch 2.1: float16 CPU autocast refused on entry
        with torch.autocast('cpu', dtype=dtype):
            assert precision.autocast_dtype('cpu') == dtype
            assert precision.float16_autocast(torch.zeros(1)) == (
                dtype == torch.float16)
            assert precision.autocast_dtype('cuda') is None
    assert precision.autocast_dtype('cpu') is None
