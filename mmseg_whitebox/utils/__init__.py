from .checkpoint_codec import decode_checkpoint, encode_checkpoint

__all__ = ['decode_checkpoint', 'encode_checkpoint']
