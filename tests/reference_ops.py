"""Straightforward versions of the operators that tests check the
library's against, written the way the papers' listings write them, not
the way the library computes them. (The CBSA paper's listing, which the
decoder benchmark also times, is
:func:`mmseg_whitebox.analysis.decoder_benchmark.straightforward_cbsa`.)
"""
from __future__ import annotations

from typing import Tuple

import torch


def softmax_attention(query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor,
                      scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T * scale) v`` and the attention matrix."""
    attn = torch.softmax(query @ key.transpose(-1, -2) * scale, dim=-1)
    return attn @ value, attn
