"""The attention operators against straightforward implementations of
their paper equations, written here independently (tokens as columns,
explicit loops over subspaces, as the papers write them)."""
import math

import pytest
import torch

from mmseg_whitebox.analysis.complexity import flop_analyzer
from mmseg_whitebox.analysis.decoder_benchmark import straightforward_cbsa
from mmseg_whitebox.ops import (CBSA, ISTA, MHSA, MSSA, QKVCBSA, TSSA,
                                CrossMSSA)

from _helpers import default_dtype


@pytest.fixture(autouse=True)
def float64():
    """Compare in double precision (to ~1e-10, not ~1e-5)."""
    with default_dtype(torch.float64):
        yield


def bases(op):
    """The subspace bases U_k (d x p) of an operator, k = 1..K."""
    w = op.proj.weight  # (K*p, d): rows are basis vectors
    return [w[k * op.head_dim:(k + 1) * op.head_dim].t()
            for k in range(op.num_heads)]


def back(op, zs):
    """Project per-subspace results (p x N each) back to d x N."""
    if op.out_proj is None:  # rigorous: sum_k U_k z_k
        return sum(u @ z for u, z in zip(bases(op), zs))
    stacked = torch.cat(zs, dim=0)  # (K*p, N)
    return op.out_proj.weight @ stacked + op.out_proj.bias[:, None]


def col_softmax(m):
    return torch.softmax(m, dim=0)


# ----------------------------------------------------------------- MSSA
def mssa_reference(op, Z):
    """CRATE eq. (11)-(12) (the step size absorbs p/(N eps^2))."""
    outs = []
    for U in bases(op):
        W = U.t() @ Z  # p x N
        outs.append(W @ col_softmax(W.t() @ W / math.sqrt(op.head_dim)))
    out = back(op, outs)
    return out if op.step_size is None else op.step_size * out


@pytest.mark.parametrize('out_proj', ['tied', 'linear'])
def test_mssa_matches_crate_equation(out_proj):
    torch.manual_seed(0)
    op = MSSA(24, num_heads=3, head_dim=5, out_proj=out_proj)
    x = torch.randn(2, 17, 24)
    out = op(x)
    for b in range(2):
        ref = mssa_reference(op, x[b].t()).t()
        torch.testing.assert_close(out[b], ref)


def test_cross_mssa_matches_equation():
    torch.manual_seed(0)
    op = CrossMSSA(24, num_heads=2, head_dim=4)
    q, x = torch.randn(2, 5, 24), torch.randn(2, 11, 24)
    out = op(q, x)
    for b in range(2):
        outs = []
        for U in bases(op):
            Wq, Wx = U.t() @ q[b].t(), U.t() @ x[b].t()
            outs.append(Wx @ col_softmax(Wx.t() @ Wq / math.sqrt(4)))
        ref = op.step_size * back(op, outs)
        torch.testing.assert_close(out[b], ref.t())


# ----------------------------------------------------------------- TSSA
def tssa_reference(op, Z):
    """ToST: TSSA(Z) = -sum_k U_k D(Z, pi_k) U_k^T Z Diag(pi_k), with the
    published choices of pi (softmax over subspaces of each token's
    normalised energy times a per-subspace temperature) and D."""
    U = bases(op)
    K = len(U)
    W = [u.t() @ Z for u in U]  # p x N each
    energy = torch.stack([
        ((w / w.norm(dim=1, keepdim=True))**2).sum(0) for w in W])  # K x N
    pi = torch.softmax(energy * op.temp, dim=0)  # over subspaces
    outs = []
    for k in range(K):
        weights = pi[k] / (pi[k].sum() + op.eps)
        second = (W[k]**2) @ weights  # p
        D = torch.diag(1.0 / (1.0 + second))
        outs.append(-D @ W[k] @ torch.diag(pi[k]))
    return back(op, outs)


def test_tssa_matches_tost_equation():
    torch.manual_seed(0)
    op = TSSA(24, num_heads=3, head_dim=6)
    with torch.no_grad():
        op.temp.copy_(torch.tensor([[0.5], [1.0], [2.0]]))
    x = torch.randn(2, 19, 24)
    out = op(x)
    for b in range(2):
        torch.testing.assert_close(out[b], tssa_reference(op, x[b].t()).t())


# ----------------------------------------------------------------- CBSA
def avgpool_reference(W, h, w, rh, rw):
    """Average each (h/rh) x (w/rw) block of a row-major token grid."""
    p = W.shape[0]
    grid = W.reshape(p, h, w)
    bh, bw = h // rh, w // rw
    cols = []
    for i in range(rh):
        for j in range(rw):
            block = grid[:, i * bh:(i + 1) * bh, j * bw:(j + 1) * bw]
            cols.append(block.reshape(p, -1).mean(1))
    return torch.stack(cols, dim=1)  # p x m


def cbsa_reference(op, Z, h, w, grid_start=0, stop_gradient=True):
    """CBSA paper eq. (5) and (8), tokens as columns of Z (d x N)."""
    rh, rw = op.rep_grid
    s = 1 / math.sqrt(op.head_dim)
    outs = []
    for k, U in enumerate(bases(op)):
        W = U.t() @ Z  # p x N
        Qini = avgpool_reference(W[:, grid_start:grid_start + h * w], h, w,
                                 rh, rw)
        if stop_gradient:  # sg(avgpool(U^T Z))
            Qini = Qini.detach()
        A = col_softmax(W.t() @ Qini * s)  # N x m, softmax over tokens
        Q = Qini + op.eta[k, 0, 0] * W @ A  # eq. (5)
        contraction = Q @ col_softmax(Q.t() @ Q * s)  # p x m, eq. (8)
        outs.append(op.kappa[k, 0, 0] * contraction @ A.t())  # broadcast
    return back(op, outs)


@pytest.mark.parametrize('out_proj', ['linear', 'tied'])
@pytest.mark.parametrize('h, w, rep, extra_before, extra_after', [
    (8, 8, (4, 4), 0, 5),   # square grid, class tokens after (decoder)
    (6, 9, (3, 3), 1, 0),   # non-square grid, CLS token first (encoder)
    (4, 6, (2, 3), 2, 3),   # tokens on both sides
])
def test_cbsa_matches_paper_equations(out_proj, h, w, rep, extra_before,
                                      extra_after):
    torch.manual_seed(0)
    op = CBSA(20, num_heads=2, head_dim=6, rep_grid=rep, out_proj=out_proj)
    n = extra_before + h * w + extra_after
    x = torch.randn(2, n, 20)
    out, attn = op(x, (h, w), grid_start=extra_before, return_attn=True)
    assert attn.shape == (2, 2, rep[0] * rep[1], n)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 2, rep[0] * rep[1]))
    for b in range(2):
        ref = cbsa_reference(op, x[b].t(), h, w, extra_before)
        torch.testing.assert_close(out[b], ref.t())


def test_cbsa_reproduces_published_listing_on_square_grids():
    """The CBSA paper's Appendix D listing, as the decoder benchmark's
    straightforward baseline writes it (square grid, class tokens at the
    end), computes what the library computes."""
    torch.manual_seed(0)
    op = CBSA(30, num_heads=3, head_dim=10, rep_grid=(5, 5))
    x = torch.randn(2, 100 + 7, 30)
    torch.testing.assert_close(op(x, (10, 10)),
                               straightforward_cbsa(op, x, 10, 10))


def test_cbsa_stop_gradient_on_initial_representatives():
    torch.manual_seed(0)
    op = CBSA(16, num_heads=2, head_dim=4, rep_grid=(2, 2))
    x = torch.randn(1, 16 + 2, 16, requires_grad=True)
    w = op.project(x)
    assert w.requires_grad
    assert not op.initial_representatives(w, (4, 4), 0).requires_grad
    # the input gradient equals the reference's with sg(), and differs
    # from what it would be if gradients flowed through the pooling
    grad = torch.autograd.grad(op(x, (4, 4)).sum(), x)[0]
    z = x[0].t()
    with_sg = torch.autograd.grad(cbsa_reference(op, z, 4, 4).sum(), x)[0]
    torch.testing.assert_close(grad, with_sg)

    without_sg = torch.autograd.grad(
        cbsa_reference(op, z, 4, 4, stop_gradient=False).sum(), x)[0]
    assert not torch.allclose(grad, without_sg)


def test_cbsa_without_stop_gradient_as_the_released_code():
    """rep_stop_grad=False: gradients flow through the pooled initial
    representatives (the Appendix D listing); the forward is the same."""
    torch.manual_seed(0)
    op = CBSA(16, num_heads=2, head_dim=4, rep_grid=(2, 2),
              rep_stop_grad=False)
    x = torch.randn(1, 16 + 2, 16, requires_grad=True)
    out = op(x, (4, 4))
    ref = cbsa_reference(op, x[0].t(), 4, 4, stop_gradient=False)
    torch.testing.assert_close(out[0], ref.t())
    grad = torch.autograd.grad(out.sum(), x)[0]
    torch.testing.assert_close(grad, torch.autograd.grad(ref.sum(), x)[0])


def test_cbsa_softmax_is_written_over_its_similarities():
    """The extraction attention reuses the buffer of its similarities (one
    (B, m, N) tensor per subspace, not two), and its gradient is
    torch.softmax's exactly (tolerance 0)."""
    from mmseg_whitebox.ops.cbsa import _SoftmaxOverOwnBuffer
    torch.manual_seed(0)
    x = torch.randn(2, 5, 40, requires_grad=True)
    logits = x * 3.0
    attn = _SoftmaxOverOwnBuffer.apply(logits)
    assert attn.data_ptr() == logits.data_ptr()
    reference = torch.softmax(x * 3.0, dim=-1)
    torch.testing.assert_close(attn, reference, rtol=0, atol=0)
    grad = torch.randn(2, 5, 40)
    ours = torch.autograd.grad(attn, x, grad)[0]
    torch.testing.assert_close(
        ours, torch.autograd.grad(reference, x, grad)[0], rtol=0, atol=0)
    # sensitivity: a gradient without softmax's row-sum term differs
    wrong = 3.0 * reference.detach() * grad
    assert not torch.allclose(ours, wrong)


# ------------------------------------------------ CBSA over q/k/v (Fig. 9)
def qkv_cbsa_reference(op, Z, h, w, grid_start):
    """CBSA with query/key/value projections, tokens as columns (d x N),
    one head at a time: pooled representatives in every role, extraction
    (representatives query the keys), contraction among them, broadcast
    (tokens query the representatives' keys)."""
    p, heads = op.head_dim, op.num_heads
    s = 1 / math.sqrt(p)
    W = op.qkv.weight
    bias = op.qkv.bias
    rh, rw = op.rep_grid
    outs = []
    for k in range(heads):
        proj = []
        for role in range(3):
            rows = slice(role * heads * p + k * p,
                         role * heads * p + (k + 1) * p)
            proj.append(W[rows] @ Z + bias[rows, None])  # p x N
        grid = slice(grid_start, grid_start + h * w)
        reps = [avgpool_reference(X[:, grid], h, w, rh, rw).detach()
                for X in proj]
        Q, K, V = proj
        A = col_softmax(K.t() @ reps[0] * s)  # N x m, over tokens
        reps = [R + op.eta[k, 0, 0] * X @ A for R, X in zip(reps, proj)]
        Rq, Rk, Rv = reps
        C = Rv @ col_softmax(Rk.t() @ Rq * s)  # p x m
        B = col_softmax(Rk.t() @ Q * s)  # m x N, over representatives
        outs.append(op.kappa[k, 0, 0] * C @ B)
    return op.out_proj.weight @ torch.cat(outs) + op.out_proj.bias[:, None]


def test_qkv_cbsa_matches_its_equations():
    torch.manual_seed(0)
    op = QKVCBSA(20, num_heads=2, head_dim=6, rep_grid=(3, 3), step_init=None)
    x = torch.randn(2, 1 + 6 * 9, 20)  # CLS first, a 6x9 grid
    out = op(x, (6, 9), grid_start=1)
    for b in range(2):
        ref = qkv_cbsa_reference(op, x[b].t(), 6, 9, 1)
        torch.testing.assert_close(out[b], ref.t())


def test_tokens_as_representatives_give_mssa_and_softmax_attention():
    """CBSA paper Sec. 3.3: with the tokens themselves as representatives
    and identity coefficients, CBSA's contraction is MSSA (eq. 9) and,
    with distinct query/key/value projections, softmax attention: the
    operators agree in that setting."""
    torch.manual_seed(0)
    x = torch.randn(2, 13, 24)
    cbsa = CBSA(24, num_heads=3, head_dim=8, out_proj='tied')
    mssa = MSSA(24, num_heads=3, head_dim=8, out_proj='tied',
                step_size=False)
    mssa.proj.weight.data.copy_(cbsa.proj.weight)
    z = cbsa.project(x)  # the tokens, in every subspace
    torch.testing.assert_close(cbsa.project_back(cbsa.contract(z)), mssa(x))

    qkv_cbsa = QKVCBSA(24, num_heads=3, head_dim=8)
    mhsa = MHSA(24, num_heads=3, head_dim=8)
    mhsa.load_state_dict(qkv_cbsa.state_dict(), strict=False)
    q, k, v = qkv_cbsa.project(x)
    torch.testing.assert_close(qkv_cbsa.merge(qkv_cbsa.contract(q, k, v)),
                               mhsa(x))
    # and MHSA is the standard attention torch (and mmseg's ViT) computes
    torch_mha = torch.nn.MultiheadAttention(24, 3, batch_first=True)
    torch_mha.in_proj_weight.data.copy_(mhsa.qkv.weight)
    torch_mha.in_proj_bias.data.copy_(mhsa.qkv.bias)
    torch_mha.out_proj.load_state_dict(mhsa.out_proj.state_dict())
    torch.testing.assert_close(mhsa(x), torch_mha(x, x, x)[0])


def test_rigorous_cbsa_has_no_output_linear_and_stays_in_the_subspaces():
    torch.manual_seed(0)
    op = CBSA(40, num_heads=2, head_dim=5, rep_grid=(3, 3), out_proj='tied')
    names = {n for n, _ in op.named_parameters()}
    assert names == {'proj.weight', 'eta', 'kappa'}
    out = op(torch.randn(1, 36 + 4, 40), (6, 6))
    # every output token lies in span(U_1, ..., U_K) (10 of 40 dims)
    U = torch.cat(bases(op), dim=1)
    coef = torch.linalg.lstsq(U, out[0].t()).solution
    torch.testing.assert_close(U @ coef, out[0].t())


def test_ops_work_for_any_batch_size_and_token_count():
    torch.manual_seed(0)
    for b, h, w, extra in [(1, 1, 1, 0), (3, 2, 7, 4), (2, 32, 48, 150)]:
        x = torch.randn(b, h * w + extra, 32)
        rep = (min(h, 10), min(w, 10))  # at most the token grid
        assert CBSA(32, 2, 8, rep)(x, (h, w)).shape == x.shape
        assert MSSA(32, 2, 8)(x).shape == x.shape
        assert TSSA(32, 2, 8)(x).shape == x.shape
        query = torch.randn(b, 3, 32)
        assert CrossMSSA(32, 2, 8)(query, x).shape == (b, 3, 32)
    with pytest.raises(ValueError, match='does not fit'):
        CBSA(32, 2, 8)(torch.randn(1, 10, 32), (4, 4))
    with pytest.raises(ValueError, match='larger than the 2x7 token grid'):
        CBSA(32, 2, 8, (3, 3))(torch.randn(1, 14, 32), (2, 7))


def test_ista_matches_crate_equation():
    """CRATE eq. (17): ReLU(Z + eta D^T (Z - D Z) - eta lambda)."""
    torch.manual_seed(0)
    op = ISTA(12)
    Z = torch.randn(12, 9)  # d x N
    D = op.weight
    ref = torch.relu(Z + 0.1 * D.t() @ (Z - D @ Z) - 0.1 * 0.1)
    torch.testing.assert_close(op(Z.t()[None])[0], ref.t())


# ------------------------------------------------------------ complexity
def cbsa_flops(n_grid, rep, d=64, k=2, p=16, extra=10):
    op = CBSA(d, k, p, rep_grid=rep).eval()
    side = int(n_grid**0.5)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.op = op

        def forward(self, x):
            return self.op(x, (side, side))

    x = torch.randn(1, n_grid + extra, d)
    return flop_analyzer(Wrap(), (x, )).total()


def test_cbsa_cost_is_linear_in_tokens_and_representatives():
    d, k, p = 64, 2, 16
    # per grid token: U^T z, extraction (2 products) and the broadcast
    # straight back to R^d (each linear in the number of representatives
    # m), and the pooled initialisation (mmengine counts 1 per pooled
    # element)
    for m_side in (2, 4, 8):
        m = m_side**2
        f1 = cbsa_flops(16**2, (m_side, m_side))
        f2 = cbsa_flops(32**2, (m_side, m_side))
        per_token = (f2 - f1) / (32**2 - 16**2)
        assert per_token == d * k * p + 2 * k * m * p + k * m * d + k * p
    # more representatives: per extra representative 2*K*N*p (extraction)
    # + K*N*d (broadcast) + K*p*d (its value taken back to R^d), plus the
    # contraction among them (2*K*m^2*p, independent of N)
    n = 16**2 + 10
    f_small, f_big = cbsa_flops(16**2, (4, 4)), cbsa_flops(16**2, (8, 8))
    assert f_big - f_small == (2 * k * n * p + k * n * d + k * p * d) * (
        64 - 16) + 2 * k * p * (64**2 - 16**2)
