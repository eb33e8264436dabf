"""White-box attention operators, one file each; used by the decode heads
and the encoders alike. Each returns the *update* of a residual step (the
caller adds it to the tokens), except ISTA, which returns new tokens."""
from .cbsa import CBSA
from .ista import ISTA
from .mssa import MSSA, CrossMSSA
from .subspace import SubspaceAttention
from .tssa import TSSA

__all__ = ['CBSA', 'CrossMSSA', 'ISTA', 'MSSA', 'SubspaceAttention', 'TSSA']
