"""The config-text fix of :mod:`mmseg_whitebox.compat`, applied by
``runner_config`` for every run it configures (mmengine 0.10.7 and
onedl-mmengine 0.10.12 with yapf 0.43 checked).

*What it patches.* yapf's ``FormatCode`` where mmengine's
``Config.pretty_text`` finds it: yapf's module
``yapf.yapflib.yapf_api`` (read at each call by onedl-mmengine) and
``mmengine.config.config`` (mmengine 0.10.7 imports it there once).

*Why.* mmengine formats a config's text with yapf every time
``pretty_text`` is read, and a training run reads it five times before
its first checkpoint (the dumped config, the visualizer's copy, the
logged environment, the message hub) and once per checkpoint (its
``meta.cfg``): the same text each time (what that costs:
docs/benchmarks.md, "Config formatting").

*What it does.* :func:`format_config_text_once` memoizes ``FormatCode``:
each distinct text is formatted once, every output stays the same
(``tests/test_config_text.py``).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Tuple

#: distinct texts kept formatted (a run has one config; a sweep a few)
CACHED_TEXTS = 8


def _memoized(format_code: Callable[..., Tuple[str, bool]]
              ) -> Callable[..., Tuple[str, bool]]:
    """``format_code`` (yapf's ``FormatCode``) answering a repeated call
    from memory; a call it cannot key (an unhashable argument) runs as
    before."""

    @functools.lru_cache(maxsize=CACHED_TEXTS)
    def cached(text: str, style: Any, kwargs: Any) -> Tuple[str, bool]:
        return format_code(text, style_config=dict(style) if isinstance(
            style, tuple) else style, **dict(kwargs))

    @functools.wraps(format_code)
    def format_once(text: str, style_config: Any = None,
                    **kwargs: Any) -> Tuple[str, bool]:
        style = (tuple(sorted(style_config.items()))
                 if isinstance(style_config, dict) else style_config)
        key = (text, style, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:  # not a config's call
            return format_code(text, style_config=style_config, **kwargs)
        return cached(*key)

    format_once.memoized = True  # type: ignore[attr-defined]
    return format_once


def format_config_text_once() -> None:
    """Memoize ``FormatCode`` in yapf's module and mmengine's config
    module (see the module docstring). Safe to call again."""
    import mmengine.config.config as config_module
    from yapf.yapflib import yapf_api
    for module in (yapf_api, config_module):
        format_code = getattr(module, 'FormatCode', None)
        if format_code is not None and \
                not getattr(format_code, 'memoized', False):
            module.FormatCode = _memoized(format_code)
