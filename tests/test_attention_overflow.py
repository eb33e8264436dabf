"""float16 and bfloat16 at activation magnitudes a trained model reaches:
every attention operator finite on scaled-dot-product attention's math
path, and, on a GPU, under each backend.

The probe: tokens scaled so that the operator's query (and key)
coordinates have a root mean square ``c`` with ``c**2`` = 1e2 and 1e3
(the typical product ``|q_i k_i|`` of a query and a key coordinate;
features of a few tens), at the published widths (MSSA head_dim 100,
CrossMSSA 50, CBSA 100 with its ``eta`` gathering, MHSA/QKVCBSA/MiTA 64
with QKVCBSA's values 3 x 64 wide). There ``q . k`` reaches about
``p c**2`` = 1e5: formed in float16 before the scale, it overflows
65504.

The math path: CUDA's math kernel (picked where no fused kernel takes the
shapes, or asked for) and CPU attention on torch 2.1 form ``Q K^T`` in
the inputs' dtype, after scaling ``q`` and ``k`` by ``sqrt(scale)``
each; torch >= 2.5 computes it in float32 unless
``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``. The
CPU half of the probe calls torch's own math implementation,
``torch.ops.aten._scaled_dot_product_attention_math`` (on torch 2.1 and
2.13 alike), in the autocast dtype (with that flag on where it exists)
in place of ``F.scaled_dot_product_attention`` inside the operators, under
CPU autocast. The operators' own products (CBSA's extraction, TSSA's
statistics, MiTA) run as they always do. The CUDA half runs each
operator under each backend (``sdpa_kernel``; ``sdp_kernel`` before torch
2.3) and skips without CUDA.

Only the forward pass is probed: an overflow there is not seen by the
loss scaler, while the gradients are scaled by it.
"""
import contextlib
from typing import Dict, List, Tuple

import pytest
import torch
import torch.nn.functional as F

from mmseg_whitebox.ops import (CBSA, MHSA, MSSA, QKVCBSA, TSSA, CrossMSSA,
                                MiTA, precision)

from _helpers import sdpa_backend, skip_without_cpu_autocast

DTYPES = (torch.float16, torch.bfloat16)
#: the squared root mean square of the query coordinates
MAGNITUDES = (1e2, 1e3)
FLOAT16_MAX = torch.finfo(torch.float16).max  # 65504
D = 192  # ViT-T's width
HW = (16, 16)

#: every attention operator, at the published head widths
OPERATORS = {
    'cbsa': lambda: CBSA(D, 3, 100, rep_grid=(4, 4)),
    'cbsa-tied': lambda: CBSA(D, 3, 100, rep_grid=(4, 4), out_proj='tied'),
    'mssa': lambda: MSSA(D, 3, 100),
    'cross-mssa': lambda: CrossMSSA(D, 3, 50),
    'tssa': lambda: TSSA(D, 3, 100),
    'mhsa': lambda: MHSA(D, 3),
    'qkv-cbsa': lambda: QKVCBSA(D, 3, rep_grid=(4, 4)),
    'mita': lambda: MiTA(D, 3, pool_size=3),
}
GRID_OPERATORS = ('cbsa', 'cbsa-tied', 'qkv-cbsa', 'mita')

pytestmark = pytest.mark.usefixtures('one_thread')


def queries(op: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The operator's queries (its subspace coordinates where query and
    key are one), in float32."""
    with torch.no_grad():
        if isinstance(op, (MHSA, QKVCBSA, MiTA)):
            return op.project(x)[0].float()
        return op.project(x).float()


def probe_input(name: str, magnitude: float) -> Tuple[torch.nn.Module,
                                                      torch.Tensor]:
    """Operator ``name`` (seed 0) and ``(2, 256, D)`` tokens scaled so
    that its query coordinates have the mean square ``magnitude``."""
    torch.manual_seed(0)
    op = OPERATORS[name]()
    x = torch.randn(2, HW[0] * HW[1], D)
    rms = queries(op, x).square().mean().sqrt()
    return op, x * (magnitude**0.5 / rms)


def run(name: str, op: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    if name == 'cross-mssa':  # 8 class-like queries
        return op(x[:, :8], x)
    if name in GRID_OPERATORS:
        return op(x, hw=HW)
    return op(x)


@contextlib.contextmanager
def low_precision_math():
    """The math path in the inputs' dtype: torch >= 2.5 computes it in
    float32 unless allowed not to (older torch always reduces in the
    inputs' dtype)."""
    backends = torch.backends.cuda
    if not hasattr(backends, 'allow_fp16_bf16_reduction_math_sdp'):
        yield
        return
    saved = backends.fp16_bf16_reduction_math_sdp_allowed()
    backends.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        yield
    finally:
        backends.allow_fp16_bf16_reduction_math_sdp(saved)


def math_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                   is_causal=False, scale=None, **kwargs):
    """``F.scaled_dot_product_attention`` on torch's math path, in the
    inputs' dtype; under autocast in the autocast dtype (autocast casts
    the inputs of ``scaled_dot_product_attention`` to it, as CUDA's does
    on every torch)."""
    assert not kwargs and attn_mask is None and not is_causal
    dtype = precision.autocast_dtype(query.device.type)
    if dtype is not None:
        query, key, value = (t.to(dtype) for t in (query, key, value))
    with low_precision_math():
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, None, dropout_p, False, scale=scale)[0]


@pytest.fixture
def math_path(monkeypatch):
    """The operators' ``F.scaled_dot_product_attention`` on the math
    path."""
    monkeypatch.setattr(F, 'scaled_dot_product_attention', math_attention)


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
@pytest.mark.parametrize('name', OPERATORS)
def test_math_path_at_real_magnitudes_stays_finite(name, dtype, math_path):
    """Every operator, under CPU autocast with its attention on the math
    path, gives a finite output at both magnitudes."""
    skip_without_cpu_autocast(dtype)
    for magnitude in MAGNITUDES:
        op, x = probe_input(name, magnitude)
        with torch.no_grad(), torch.autocast('cpu', dtype=dtype):
            out = run(name, op, x)
        assert torch.isfinite(out).all(), (name, magnitude)


def test_the_probe_reaches_float16_overflow(math_path):
    """Sensitivity: at the larger magnitude the unscaled ``q . k`` of
    MSSA passes 65504 (formed in float16 it is inf), and the patched math
    path does compute in float16 (where its scaled logits pass 65504 its
    output is not finite), while the fused CPU kernel is."""
    skip_without_cpu_autocast(torch.float16)
    op, x = probe_input('mssa', MAGNITUDES[-1])
    q = queries(op, x)
    assert (q @ q.mT).abs().max() > FLOAT16_MAX
    op, x = probe_input('mssa', 1e4)  # logits ~ sqrt(p) 1e4 = 1e5
    q = queries(op, x).half()
    assert not torch.isfinite(math_attention(q, q, q, scale=op.scale)).all()
    assert torch.isfinite(torch.ops.aten._scaled_dot_product_attention_math(
        q.float(), q.float(), q.float(), scale=op.scale)[0]).all()


# -------------------------------------------------------------- on CUDA
#: scaled-dot-product backends; 'math-float16' is the math kernel in the
#: inputs' dtype (torch < 2.5 always; later ones only when allowed)
CUDA_BACKENDS = ('flash', 'efficient', 'math', 'math-float16')


def sdpa_backends(*names: str):
    """Only the backends ``names`` (``flash``, ``efficient``, ``math``)
    may run: ``torch.nn.attention.sdpa_kernel`` (torch >= 2.3), else
    ``torch.backends.cuda.sdp_kernel``."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return torch.backends.cuda.sdp_kernel(
            enable_flash='flash' in names, enable_math='math' in names,
            enable_mem_efficient='efficient' in names)
    members = dict(flash=SDPBackend.FLASH_ATTENTION,
                   efficient=SDPBackend.EFFICIENT_ATTENTION,
                   math=SDPBackend.MATH)
    return sdpa_kernel([members[n] for n in names])


def ran_backends(events) -> List[str]:
    return sorted({sdpa_backend(e.name) for e in events
                   if sdpa_backend(e.name)})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason='needs CUDA: the fused GPU kernels and CUDA\'s '
                    'math kernel (the CPU half of the probe runs above)')
@pytest.mark.parametrize('backend', CUDA_BACKENDS)
def test_cuda_backends_at_real_magnitudes_stay_finite(backend):
    """Every operator under CUDA autocast in float16 and bfloat16 at both
    magnitudes, its attention on one backend (float32 calls, which the
    fused flash kernel does not take, may fall back to the math kernel,
    which is exact there): finite outputs. Which backend each low-
    precision call ran is read from the profiler; a backend that takes
    none of an operator's shapes is named in the skip."""
    from torch.profiler import ProfilerActivity, profile
    if backend == 'math-float16' and not hasattr(
            torch.backends.cuda, 'allow_fp16_bf16_reduction_math_sdp'):
        pytest.skip(f'torch {torch.__version__}: its math kernel always '
                    'computes in the inputs\' dtype (the "math" case)')
    names = ('math', ) if backend.startswith('math') else (backend, 'math')
    ran: Dict[str, List[str]] = {}
    failures, unavailable = [], []
    for name in OPERATORS:
        for dtype in DTYPES:
            if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
                continue
            for magnitude in MAGNITUDES:
                op, x = probe_input(name, magnitude)
                op, x = op.cuda(), x.cuda()
                reduced = low_precision_math() if backend == 'math-float16' \
                    else contextlib.nullcontext()
                try:
                    with torch.no_grad(), sdpa_backends(*names), reduced, \
                            torch.autocast('cuda', dtype=dtype), profile(
                                activities=[ProfilerActivity.CPU]) as prof:
                        out = run(name, op, x)
                        torch.cuda.synchronize()
                except RuntimeError as exc:
                    if 'No available kernel' not in str(exc):
                        raise
                    unavailable.append(f'{name} {dtype}')
                    continue
                ran[name] = ran_backends(prof.events())
                if not torch.isfinite(out).all():
                    failures.append((name, str(dtype), magnitude, ran[name]))
    assert not failures, failures
    if unavailable:
        pytest.skip(f'{backend} takes no shape of: '
                    f'{", ".join(unavailable)}; the others finite ({ran})')
