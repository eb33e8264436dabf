"""White-box attention operators, one file each; used by the decode heads
and the encoders alike. Each returns the *update* of a residual step (the
caller adds it to the tokens), except ISTA, which returns new tokens.
MHSA (standard softmax attention), QKVCBSA (CBSA over a pretrained
ViT's query/key/value projections) and MiTA (mixture-of-top-k attention)
share that interface."""
from .cbsa import CBSA
from .ista import ISTA
from .mhsa import MHSA
from .mita import MiTA
from .mssa import MSSA, CrossMSSA
from .qkv_cbsa import QKVCBSA
from .subspace import SubspaceAttention
from .tssa import TSSA

__all__ = [
    'CBSA', 'CrossMSSA', 'ISTA', 'MHSA', 'MiTA', 'MSSA', 'QKVCBSA',
    'SubspaceAttention', 'TSSA'
]
