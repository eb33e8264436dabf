"""MiTA: mixture-of-top-k attention (Wen, Huang, He, Meng & Li 2026,
"Mixture-of-Top-k Attention: Efficient Attention via Scalable Fast
Weights", arXiv 2602.01219; QishuaiWen/MiTA).

Per head, with landmarks ``r_1 .. r_M`` (the released "routers": the
queries average-pooled to ``s x s`` cells), routed experts
``S_m = top-k_j (r_m . k_j)``, top-1 routing ``e(i) = argmax_m (r_m . q_i)``
and the shared expert ``a_m = sum_j softmax_j(r_m . k_j / sqrt(p)) v_j``,
one softmax mixes both::

    y_i = ( sum_m exp(alpha_im) a_m + sum_{j in S_e(i)} exp(beta_ij) v_j )
          / ( sum_m exp(alpha_im) + sum_{j in S_e(i)} exp(beta_ij) )
    alpha_im = q_i . r_m / p,     beta_ij = q_i . k_j / sqrt(p)

then the output projection. ``alpha`` is scaled twice, as the released
``MixedAttention`` (keys ``r_m / sqrt(p)``, softmax scale ``1/sqrt(p)``),
whose two flash-attention passes merged by their log-sum-exps are this
joint softmax. ``shared_expert=False`` (the released
``MiTA_Attention_Route``) takes the softmax over ``S_e(i)`` alone.

Unlike the released code: pure torch on any device, without its float16
cast (under a float16 autocast the attention runs in float32); any
``H x W`` grid with any extra tokens around it (``router_pool='leading'``
pools the first ``H x W`` tokens, as the released encoder); ``k`` above
the token count selects every token. Ties go as ``torch.argmax`` and
``torch.topk`` decide, as released.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from . import precision
from .cbsa import GridSize, _pair, check_grid, pool_grid
from .mhsa import QKVProjection

ROUTER_POOLS = ('grid', 'leading')


def gather_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[b, h, index[b, h, i, j]]``: ``(B, K, I, J, p)``."""
    b, k, i, j = index.shape
    flat = index.reshape(b, k, i * j, 1).expand(-1, -1, -1, x.shape[-1])
    return torch.gather(x, 2, flat).view(b, k, i, j, x.shape[-1])


class MiTA(QKVProjection):
    """Mixture-of-top-k attention; returns the update.

    Args:
        dim, num_heads, head_dim, qkv_bias, init_std: as :class:`~.MHSA`
            (a pretrained ViT's attention loads one to one).
        pool_size: ``s`` or ``(sh, sw)``, the landmarks' grid (released:
            7; route-only variant 9).
        kv_topk: keys per routed expert; default ``sh * sw`` (released;
            the route-only variant takes twice that).
        shared_expert: mix in the shared expert; ``False``: route-only.
        router_pool: ``'grid'`` or ``'leading'`` (module docstring).
    """

    def __init__(self,
                 dim: int,
                 num_heads: int = 6,
                 head_dim: Optional[int] = None,
                 pool_size: GridSize = 7,
                 kv_topk: Optional[int] = None,
                 shared_expert: bool = True,
                 router_pool: str = 'grid',
                 qkv_bias: bool = True,
                 init_std: float = 0.02) -> None:
        super().__init__(dim, num_heads, head_dim, qkv_bias, init_std)
        if router_pool not in ROUTER_POOLS:
            raise ValueError(f'router_pool must be one of {ROUTER_POOLS}, '
                             f'got {router_pool!r}')
        self.pool_size = _pair(pool_size, 'pool_size')
        self.kv_topk = kv_topk or self.pool_size[0] * self.pool_size[1]
        if self.kv_topk < 1:
            raise ValueError(f'kv_topk must be positive, got {kv_topk}')
        self.shared_expert = shared_expert
        self.router_pool = router_pool
        self.reset_parameters()

    def forward(self,
                x: torch.Tensor,
                hw: Tuple[int, int],
                grid_start: int = 0) -> torch.Tensor:
        """``(B, N, d)`` tokens whose ``H x W`` grid starts at
        ``x[:, grid_start]`` -> the update ``(B, N, d)``."""
        check_grid(x, hw, grid_start)
        q, k, v = self.project(x)
        start = 0 if self.router_pool == 'leading' else grid_start
        routers = pool_grid(q, hw, start, self.pool_size,
                            'pool_size')  # (B, K, M, p)
        return self.merge(precision.float32_under_float16(
            self.attend, q, k, v, routers))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               routers: torch.Tensor) -> torch.Tensor:
        """The mixture of the module docstring, ``(B, K, N, p)``."""
        topk = min(self.kv_topk, k.shape[2])
        # the ranking needs no scale
        selected = torch.topk(routers @ k.mT, topk, dim=-1,
                              sorted=False).indices  # (B, K, M, k)
        expert = torch.argmax(routers @ q.mT, dim=-2)  # (B, K, N)
        keys = torch.gather(
            selected, 2, expert.unsqueeze(-1).expand(-1, -1, -1, topk))
        k_routed = gather_tokens(k, keys)  # (B, K, N, k, p)
        v_routed = gather_tokens(v, keys)
        beta = torch.einsum('bhnp,bhnkp->bhnk', q, k_routed) * self.scale
        if not self.shared_expert:
            weights = torch.softmax(beta, dim=-1)
            return torch.einsum('bhnk,bhnkp->bhnp', weights, v_routed)
        agents = F.scaled_dot_product_attention(routers, k, v,
                                                scale=self.scale)
        alpha = (q * self.scale**2) @ routers.mT  # (B, K, N, M)
        weights = torch.softmax(torch.cat([alpha, beta], dim=-1), dim=-1)
        shared, routed = weights.split([alpha.shape[-1], topk], dim=-1)
        return shared @ agents + torch.einsum('bhnk,bhnkp->bhnp', routed,
                                              v_routed)

    def extra_repr(self) -> str:
        text = (super().extra_repr() + f', pool_size={self.pool_size}, '
                f'kv_topk={self.kv_topk}')
        if not self.shared_expert:
            text += ', shared_expert=False'
        if self.router_pool != 'grid':
            text += f', router_pool={self.router_pool!r}'
        return text
