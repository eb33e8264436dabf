from .bounded_encoder_decoder import (BoundedMemoryEncoderDecoder,
                                      resize_argmax_tiled)

__all__ = ['BoundedMemoryEncoderDecoder', 'resize_argmax_tiled']
