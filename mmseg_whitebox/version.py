"""The package's version and the torch releases it runs on."""
from mmseg_whitebox.utils.capabilities import release

__version__ = '0.1.0'

#: the oldest torch supported (requirements.txt declares the same):
#: mmseg 1.2.2's own stack, whose compiled mmcv 2.1 wheels stop at torch 2.1
MIN_TORCH = (2, 1)


def check_torch(version: str) -> None:
    """Refuse a torch older than :data:`MIN_TORCH` at import, with what to
    do, instead of an AttributeError deep inside the first forward."""
    found = release(version)
    if found is not None and found < MIN_TORCH:
        need = '.'.join(map(str, MIN_TORCH))
        raise ImportError(
            f'mmseg_whitebox needs torch >= {need}, found torch {version}: '
            f'install torch >= {need} (e.g. pip install "torch>={need}")')
