"""A config's text is formatted once per distinct text: mmengine's
``Config.pretty_text`` (read five times before a run's first checkpoint
and once per checkpoint) asks yapf once and answers the same text."""
import os.path as osp

import mmengine.config.config as config_module
from mmengine.config import Config
from yapf.yapflib import yapf_api

from _helpers import REPO, demo_configs
from mmseg_whitebox.compat import format_config_text_once


def unmemoized(format_code):
    while getattr(format_code, 'memoized', False):
        format_code = format_code.__wrapped__
    return format_code


def test_pretty_text_formats_each_distinct_text_once(monkeypatch):
    yapf_format = unmemoized(yapf_api.FormatCode)
    calls = []

    def counted(text, **kwargs):
        calls.append(text)
        return yapf_format(text, **kwargs)

    # where each mmengine looks it up: yapf's module (onedl's mmengine, at
    # each call) and mmengine's config module (0.10.7, imported once)
    monkeypatch.setattr(yapf_api, 'FormatCode', counted)
    monkeypatch.setattr(config_module, 'FormatCode', counted, raising=False)
    cfg = Config.fromfile(osp.join(REPO, demo_configs()['cbsa']))
    plain = cfg.pretty_text
    # mmengine, unpatched, formats the same text again at every read (what
    # the fix is for)
    assert cfg.pretty_text == plain and len(calls) == 2
    format_config_text_once()
    format_config_text_once()  # a second call changes nothing
    texts = [cfg.pretty_text for _ in range(3)]
    assert texts == [plain] * 3
    assert len(calls) == 3  # the plain calls, then one for the three
    cfg.train_cfg.max_iters = 7
    changed = cfg.pretty_text
    assert len(calls) == 4 and 'max_iters=7' in changed
    assert changed != plain
    assert cfg.pretty_text == changed and len(calls) == 4


def test_a_call_that_cannot_be_keyed_still_formats(monkeypatch):
    """An unhashable argument (not mmengine's call) is passed through."""
    yapf_format = unmemoized(yapf_api.FormatCode)
    monkeypatch.setattr(yapf_api, 'FormatCode', yapf_format)
    format_config_text_once()
    assert yapf_api.FormatCode('x=[1,\n2]\n', lines=[[1, 2]]) == \
        yapf_format('x=[1,\n2]\n', lines=[[1, 2]])
