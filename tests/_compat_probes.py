"""What each fix of :mod:`mmseg_whitebox.compat` changes, as probes that run
unchanged with the fixes off and on.

Off: ``python tests/_compat_probes.py OUT.json ...`` in a fresh
interpreter; nothing here imports ``mmseg_whitebox`` (the report lists what
of it was imported). On: the same functions in the test process, where
``import mmseg_whitebox`` applied the fixes. Every probe returns plain
data (JSON), so both sides compare.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
import types
from typing import Any, Dict, Iterator

import numpy as np
import torch


def import_outcome(module: str) -> str:
    """``'ok'``, or the error's type and first line."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # what fails is the finding
        return f'{type(exc).__name__}: {str(exc).splitlines()[0]}'
    return 'ok'


class CreatesFile:
    """Unpickling this creates the file ``path`` (stands for any code)."""

    def __init__(self, path: str) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, 'w'))


def write_evil_checkpoint(path: str, marker: str) -> None:
    """A checkpoint whose full unpickling creates ``marker``; the pickle
    names only ``builtins.open``, so any interpreter can load it."""
    torch.save({'state_dict': {'w': torch.zeros(2)},
                'meta': {'payload': CreatesFile(marker)}}, path)


def unsafe_load_outcome(loader: str, path: str, marker: str) -> Dict[str, Any]:
    """Load the evil checkpoint ``path`` with mmengine's local loader
    (``loader='local'``: ``_load_checkpoint``) or with onedl-mmengine's
    ``_safe_torch_load`` (``'fallback'``: what its ``openmmlab://`` and
    ``pavi://`` loaders call with a file path): ``{'outcome': 'loaded' or
    the error's type, 'payload_ran'}``; ``{'outcome': 'absent'}`` on an
    mmengine without ``_safe_torch_load`` (0.10.7)."""
    from mmengine.runner import checkpoint
    if loader == 'local':
        def load():
            return checkpoint._load_checkpoint(path, map_location='cpu')
    elif not hasattr(checkpoint, '_safe_torch_load'):
        return {'outcome': 'absent'}
    else:
        def load():
            return checkpoint._safe_torch_load(path, map_location='cpu')
    try:
        load()
        outcome = 'loaded'
    except Exception as exc:  # a refusal is the finding
        outcome = type(exc).__name__
    return {'outcome': outcome, 'payload_ran': os.path.exists(marker)}


#: the URL whose file :func:`url_unsafe_load_outcome` plants in the hub
#: cache (a reserved domain that never resolves; the cached file is read
#: without a download)
EVIL_URL = 'https://example.invalid/weights/url_evil.pth'


def url_unsafe_load_outcome(torch_home: str, marker: str) -> Dict[str, Any]:
    """Load :data:`EVIL_URL` with mmengine's loaders, its file an evil
    checkpoint already in the hub cache of ``torch_home`` (``TORCH_HOME``
    is set to it for the load): ``{'outcome', 'payload_ran'}`` as
    :func:`unsafe_load_outcome`."""
    from mmengine.runner import checkpoint
    before = os.environ.get('TORCH_HOME')
    os.environ['TORCH_HOME'] = torch_home
    try:
        checkpoint._load_checkpoint(EVIL_URL, map_location='cpu')
        outcome = 'loaded'
    except Exception as exc:  # a refusal is the finding
        outcome = type(exc).__name__
    finally:
        if before is None:
            del os.environ['TORCH_HOME']
        else:
            os.environ['TORCH_HOME'] = before
    return {'outcome': outcome, 'payload_ran': os.path.exists(marker)}


def write_evil_url_file(torch_home: str, marker: str) -> None:
    """The evil checkpoint where torch's hub cache in ``torch_home`` keeps
    :data:`EVIL_URL`'s file."""
    folder = os.path.join(torch_home, 'hub', 'checkpoints')
    os.makedirs(folder, exist_ok=True)
    write_evil_checkpoint(
        os.path.join(folder, os.path.basename(EVIL_URL)), marker)


def write_project_checkpoint(path: str) -> None:
    """A checkpoint as this project's WeightsOnlyCheckpointHook writes it:
    the message hub's ``HistoryBuffer`` and a numpy score as plain data."""
    from mmengine.logging import HistoryBuffer

    from mmseg_whitebox.utils.checkpoint_codec import encode_checkpoint
    torch.save(encode_checkpoint({
        'meta': {'iter': 2, 'best_score': np.float64(0.25)},
        'state_dict': {'w': torch.zeros(2)},
        'message_hub': {
            'log_scalars': {'train/loss': HistoryBuffer([1.0, 0.5], [1, 1])},
            'runtime_info': {}, 'resumed_keys': {'train/loss': True}},
    }), path)


def project_checkpoint_outcome(path: str) -> Dict[str, Any]:
    """Load :func:`write_project_checkpoint`'s file as ``--resume`` does
    (mmengine's ``_load_checkpoint``, then the message hub's state): what
    the logged loss and the best score load as, which scalars resume."""
    from mmengine.logging import MessageHub
    from mmengine.runner.checkpoint import _load_checkpoint
    ckpt = _load_checkpoint(path, map_location='cpu')
    hub = MessageHub(f'compat-probe-{os.getpid()}-{id(ckpt)}')
    hub.load_state_dict(ckpt['message_hub'])
    return {
        'loss_loads_as': type(
            ckpt['message_hub']['log_scalars']['train/loss']).__name__,
        'best_score_loads_as': type(ckpt['meta']['best_score']).__name__,
        'resumed_scalars': sorted(hub.log_scalars),
    }


class RandomPipeline(torch.utils.data.Dataset):
    """Items made by a random transform that draws from numpy's global
    state (as mmcv's transforms do); counts how often one is loaded."""

    def __init__(self) -> None:
        self.loads = 0

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        self.loads += 1
        return index * 1000 + int(np.random.randint(1000))


@contextlib.contextmanager
def kept_random_state() -> Iterator[None]:
    """Leave numpy's and torch's global random states as they were."""
    np_state, torch_state = np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)


def resume_outcome() -> Dict[str, Any]:
    """Resume iteration 2 of 3 with mmengine's own ``IterBasedTrainLoop``
    (0.10.7 replays by ``next``, onedl calls ``skip_iter``), numpy's and
    torch's random states saved after iteration 2 restored right before
    the first batch to train, as ``RNGStateCheckpointHook`` does. A step
    is the batch the pipeline made plus one draw of torch's generator
    (the model's dropout / drop path). Returns how many items were loaded
    before the resumed step's batch and whether that step equals the
    uninterrupted run's."""
    from mmengine.dataset import InfiniteSampler
    from mmengine.runner.loops import IterBasedTrainLoop

    class RestoreBeforeNextBatch:
        def __init__(self, loop: Any, state: tuple) -> None:
            self.loop, self.state = loop, state
            self.inner, self.left = loop.dataloader_iterator, loop.iter

        def __iter__(self):
            return self

        def skip_iter(self, num: int) -> None:
            self.inner.skip_iter(num)
            self.left -= num

        def __next__(self):
            if self.left > 0:
                self.left -= 1
            else:
                np.random.set_state(self.state[0])
                torch.set_rng_state(self.state[1])
                self.loop.dataloader_iterator = self.inner
            return next(self.inner)

    def train(resume_from: Any = None) -> tuple:
        np.random.seed(0)
        torch.manual_seed(0)
        dataset = RandomPipeline()
        steps, states = [], []

        def call_hook(name: str, **kwargs: Any) -> None:
            if name == 'before_train' and resume_from:
                loop.dataloader_iterator = RestoreBeforeNextBatch(
                    loop, resume_from)
            if name == 'after_train_iter':
                states.append((np.random.get_state(), torch.get_rng_state()))

        def train_step(data: Any, optim_wrapper: Any = None) -> dict:
            steps.append((data.tolist(), torch.rand(1).item(),
                          dataset.loads - len(data)))
            return {}

        runner = types.SimpleNamespace(
            call_hook=call_hook, val_loop=None, optim_wrapper=None,
            visualizer=types.SimpleNamespace(dataset_meta=None),
            model=types.SimpleNamespace(train=lambda: None,
                                        train_step=train_step))
        loop = IterBasedTrainLoop(runner, torch.utils.data.DataLoader(
            dataset, batch_size=2, sampler=InfiniteSampler(dataset, seed=0)),
            max_iters=3)
        if resume_from:
            loop._iter = 2
        loop.run()
        return steps, states

    with kept_random_state():
        straight, states = train()
        (resumed,), _ = train(resume_from=states[1])
    return {'loads_while_skipping': resumed[2],
            'same_batch': resumed[0] == straight[2][0],
            'same_model_draw': resumed[1] == straight[2][1]}


def package_config_outcome() -> str:
    """Read a config whose ``_base_`` is one of mmseg's installed configs
    (``mmseg::``): ``'ok'``, or the error's type and first line."""
    import tempfile

    from mmengine.config import Config
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'inherits.py')
        with open(path, 'w', encoding='utf-8') as f:
            f.write("_base_ = ['mmseg::ccnet/"
                    "ccnet_r50-d8_4xb4-80k_ade20k-512x512.py']\n")
        try:
            Config.fromfile(path)
        except Exception as exc:  # what fails is the finding
            return f'{type(exc).__name__}: {str(exc).splitlines()[0]}'
    return 'ok'


def load_compat_alone() -> Any:
    """The ``mmseg_whitebox/compat/`` package loaded from its folder,
    without the package (whose ``__init__`` would apply every fix): the
    package and its ``utils`` stand in as bare namespaces over their
    folders, so the modules compat imports load without any other
    ``__init__``."""
    root = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), 'mmseg_whitebox')
    for name, folder in (('mmseg_whitebox', root),
                         ('mmseg_whitebox.utils', os.path.join(root,
                                                               'utils'))):
        package = types.ModuleType(name)
        package.__path__ = [folder]
        sys.modules[name] = package
    folder = os.path.join(root, 'compat')
    spec = importlib.util.spec_from_file_location(
        'mmseg_whitebox.compat', os.path.join(folder, '__init__.py'),
        submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def probe_all(evil: str, evil_marker: str, fallback_evil: str,
              fallback_marker: str, project: str, torch_home: str,
              url_marker: str) -> Dict[str, Any]:
    """Every probe, in this interpreter as it is."""
    return {
        'import torchvision': import_outcome('torchvision'),
        'import mmcv.ops': import_outcome('mmcv.ops'),
        'import mmseg.models': import_outcome('mmseg.models'),
        'local unsafe load': unsafe_load_outcome('local', evil, evil_marker),
        'fallback unsafe load': unsafe_load_outcome(
            'fallback', fallback_evil, fallback_marker),
        'cached url unsafe load': url_unsafe_load_outcome(torch_home,
                                                          url_marker),
        'project checkpoint': project_checkpoint_outcome(project),
        'resume': resume_outcome(),
        'package config': package_config_outcome(),
    }


def main(argv: list) -> None:
    """Off: every probe with no fix applied; then ``import mmseg.models``
    again after applying the mmcv.ops fix alone and then the torchvision
    fix too (which of the two mmseg needs on this stack)."""
    out, *files = argv
    report = probe_all(*files)
    compat = load_compat_alone()
    for fix, patch in (('mmcv_ops_shim', compat.patch_mmcv_ops),
                       ('torchvision_shim', compat.patch_torchvision)):
        report[f'import mmseg.models after {fix}'] = {
            'applied': patch(), 'outcome': import_outcome('mmseg.models')}
    report['mmseg_whitebox modules'] = sorted(
        m for m in sys.modules if m.split('.')[0] == 'mmseg_whitebox')
    with open(out, 'w', encoding='utf-8') as f:
        json.dump(report, f)


if __name__ == '__main__':
    main(sys.argv[1:])
