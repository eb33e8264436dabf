from .short_side import ShortSideDataPreProcessor, upsample_short_side

__all__ = ['ShortSideDataPreProcessor', 'upsample_short_side']
