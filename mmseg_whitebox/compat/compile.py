"""The inductor fix of :mod:`mmseg_whitebox.compat`, applied by
``CompileHook`` before it compiles (torch 2.1; nothing to do from torch
2.2 on; 2.1 and 2.13 checked).

*What it patches.* The decomposition table of torch's inductor
(``torch._inductor.decomposition.decompositions``): torch's own
decompositions of :data:`DECOMPOSED_OPS` are added where it lacks them.

*Why.* torch 2.2+ decomposes the loss's ``nll_loss2d`` ops; 2.1 leaves
them to a fallback kernel, which it refuses where the environment variable
``CI`` is set, as CI services set it (``AssertionError:
make_fallback(aten.nll_loss2d_forward.default): a decomposition
exists``).
"""
from __future__ import annotations

from typing import List

import torch

#: the loss's ops that inductor decomposes from torch 2.2 on
DECOMPOSED_OPS = ('nll_loss2d_forward', 'nll_loss2d_backward')


def decompose_as_newer_torch() -> List[str]:
    """Add :data:`DECOMPOSED_OPS`' decompositions to inductor's table where
    it lacks them; the names of those added (none from torch 2.2)."""
    from torch._decomp import get_decompositions
    from torch._inductor.decomposition import decompositions
    missing = [name for name in DECOMPOSED_OPS
               if getattr(torch.ops.aten, name).default not in decompositions]
    decompositions.update(get_decompositions(
        [getattr(torch.ops.aten, name) for name in missing]))
    return missing
