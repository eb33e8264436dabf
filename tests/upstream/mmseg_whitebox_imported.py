"""pytest plugin for mmseg's own unit tests (``make mmseg-tests``): this
package is imported before any test is collected, as a user's process
imports it, and the failures that have nothing to do with it are declared.

Each declared failure names the test, what it needs that this environment
lacks, the exception that lack raises, and a check for the lack. While the
check holds, the test is a strict xfail: it must still fail, and with that
exception (any other error is a failure). Where the check does not hold
(say mmdet is installed), the test carries no mark and must pass. Tests
that download weights are skipped: nothing here reaches a model hub.
"""
from __future__ import annotations

import importlib.util
import os.path as osp
from typing import Callable, Dict, NamedTuple, Type

import pytest

import mmseg_whitebox  # noqa: F401  the point: mmseg with this imported
from mmseg_whitebox import compat


def _missing(module: str) -> Callable[[], bool]:
    return lambda: importlib.util.find_spec(module) is None


def _no_checkout(*parts: str) -> Callable[[], bool]:
    """True while ``parts`` under the tests' root (the unpacked source
    distribution) does not exist: files of a repository checkout."""
    return lambda: not osp.exists(osp.join(_ROOT[0], *parts))


def _no_configs_beside_package() -> bool:
    """Some tests read ``configs/`` beside the installed ``mmseg`` folder,
    where only a source checkout installed in place has it."""
    import mmseg
    return not osp.isdir(osp.join(osp.dirname(mmseg.__file__), '..',
                                  'configs'))


class Lack(NamedTuple):
    """What a test needs and this environment lacks."""
    reason: str
    raises: Type[BaseException]
    holds: Callable[[], bool]


_ROOT = ['.']
COMPILED_OP = Lack('needs an mmcv compiled op (mmcv-lite has none; the '
                   "stand-in's error)", NotImplementedError,
                   compat.mmcv_without_compiled_ops)
DCN = Lack("builds a DCN layer, which only mmcv's compiled ops register",
           KeyError, compat.mmcv_without_compiled_ops)
MMDET = Lack('needs mmdet (not installed)', TypeError, _missing('mmdet'))
MMPRETRAIN = Lack('needs mmpretrain (not installed)', ImportError,
                  _missing('mmpretrain'))
PKG_RESOURCES = Lack('needs pkg_resources (setuptools < 81, not '
                     'installed)', ImportError, _missing('pkg_resources'))
CONFIGS_BESIDE_PACKAGE = Lack('reads configs/ beside the installed mmseg '
                              '(a checkout installed in place)',
                              FileNotFoundError, _no_configs_beside_package)
CHECKOUT_TOOLS = Lack("runs a checkout's tools/ on its tests/data (not in "
                      'the source distribution)', AssertionError,
                      _no_checkout('tests', 'data'))
#: tests that download weights (a model hub, download.openmmlab.com)
DOWNLOADS = 'downloads pretrained weights: nothing here reaches a model hub'

#: distribution -> test id -> what it lacks here
KNOWN_FAILURES: Dict[str, Dict[str, Lack]] = {
    'mmsegmentation': {
        'tests/test_config.py::test_config_data_pipeline': MMPRETRAIN,
        'tests/test_models/test_backbones/test_beit.py::test_beit_init':
        PKG_RESOURCES,
        'tests/test_models/test_backbones/test_mae.py::test_mae_init':
        PKG_RESOURCES,
        'tests/test_models/test_backbones/test_resnet.py::'
        'test_resnet_bottleneck': DCN,
        'tests/test_models/test_backbones/test_resnext.py::'
        'test_renext_bottleneck': DCN,
        'tests/test_models/test_heads/test_cc_head.py::test_cc_head':
        COMPILED_OP,
        'tests/test_models/test_heads/test_psa_head.py::test_psa_head':
        COMPILED_OP,
        'tests/test_models/test_heads/test_mask2former_head.py::'
        'test_mask2former_head': MMDET,
        'tests/test_models/test_heads/test_maskformer_head.py::'
        'test_maskformer_head': MMDET,
        'tests/test_models/test_backbones/test_vpd.py::TestVPD::'
        'test_forward': CONFIGS_BESIDE_PACKAGE,
        'tests/test_models/test_segmentors/test_depth_estimator.py::'
        'TestDepthEstimator::test__forward': CONFIGS_BESIDE_PACKAGE,
        'tests/test_models/test_segmentors/test_depth_estimator.py::'
        'TestDepthEstimator::test_slide_flip_inference':
        CONFIGS_BESIDE_PACKAGE,
    },
    'onedl-mmsegmentation': {
        'tests/test_config.py::test_config_data_pipeline': MMPRETRAIN,
        'tests/test_tools.py::TestConfusionMatrix::test_run': CHECKOUT_TOOLS,
    },
}
#: distribution -> tests skipped because they download weights
DOWNLOADING_TESTS = {
    'mmsegmentation': (
        'tests/test_models/test_backbones/test_resnet.py::'
        'test_resnet_backbone',
        'tests/test_models/test_backbones/test_timm_backbone.py::'
        'test_timm_backbone'),
}


def installed_mmseg() -> str:
    """The distribution that provides ``mmseg`` here."""
    return compat.STACKS[compat.stack()['name']][0]


def pytest_configure(config: pytest.Config) -> None:
    _ROOT[0] = str(config.rootpath)


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list) -> None:
    dist = installed_mmseg()
    known = KNOWN_FAILURES.get(dist, {})
    downloads = DOWNLOADING_TESTS.get(dist, ())
    for item in items:
        if item.nodeid in downloads:
            item.add_marker(pytest.mark.skip(reason=DOWNLOADS))
        elif item.nodeid in known and known[item.nodeid].holds():
            lack = known[item.nodeid]
            item.add_marker(pytest.mark.xfail(reason=lack.reason,
                                              raises=lack.raises,
                                              strict=True))
