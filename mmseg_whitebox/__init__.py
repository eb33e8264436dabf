"""mmseg_whitebox: white-box attention decoders for MMSegmentation 1.x.

Importing the package checks the torch version, then applies :mod:`mmseg_whitebox.compat` (only the
fixes this environment needs), then registers every module with mmseg's
registries, so configs can say ``custom_imports=dict(imports=
['mmseg_whitebox'])`` and mmseg's own tools and APIs can use them, and
adds this project's metafiles to the names ``MMSegInferencer`` resolves.
"""
from .utils.capabilities import TORCH_VERSION
from .version import check_torch

check_torch(TORCH_VERSION)  # before anything touches torch's newer API

from . import compat  # noqa: E402

compat.apply()

from . import datasets, engine, models  # noqa: E402,F401  (registration)
from .apis import register_model_index  # noqa: E402
from .version import __version__  # noqa: E402

# MMSegInferencer(model=<config name>) finds this project's configs too
register_model_index()

__all__ = ['__version__', 'apis', 'compat', 'datasets', 'engine', 'models']
