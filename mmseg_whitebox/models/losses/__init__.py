"""Loss computations: mmseg's decode-head loss in bands of label rows."""
from .banded_cross_entropy import (DEFAULT_BAND_ROWS,
                                   banded_loss_by_feat, check_banded_loss)

__all__ = [
    'DEFAULT_BAND_ROWS', 'banded_loss_by_feat',
    'check_banded_loss'
]
