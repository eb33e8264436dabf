"""White-box attention operators, one a file, shared by heads and
encoders. Each returns the *update* of a residual step, except ISTA, which
returns new tokens."""
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
