from .banded_loss_encoder_decoder import BandedLossEncoderDecoder
from .bounded_encoder_decoder import (BoundedMemoryEncoderDecoder,
                                      resize_argmax_tiled)

__all__ = [
    'BandedLossEncoderDecoder', 'BoundedMemoryEncoderDecoder',
    'resize_argmax_tiled'
]
