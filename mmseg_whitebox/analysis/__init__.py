from .complexity import decode_head_complexity, flop_analyzer

__all__ = ['decode_head_complexity', 'flop_analyzer']
