"""Bounded memory on large images (BoundedMemoryEncoderDecoder),
crash-safe training (SIGKILL between checkpoints, then --resume) and the
checkpoint a run reports (the final one, as released)."""
import ast
import copy
import glob
import io
import json
import logging
import math
import os
import os.path as osp
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import types
from typing import List

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MessageHub
from mmseg.models.segmentors import EncoderDecoder
from mmseg.structures import SegDataSample

from _helpers import (DEMO_SEGMENTER, REPO, assert_same, created_tensors,
                      small_run_options)
from mmseg_whitebox.analysis.large_image_memory import (
    agreement, build_model, large_image_memory_report, write_test_image)
from mmseg_whitebox.engine.hooks import RNGStateCheckpointHook
from mmseg_whitebox.engine.hooks.rng_state_hook import (
    capture_random_state, restore_random_state)
from mmseg_whitebox.utils.checkpoint_codec import (decode_checkpoint,
                                                   encode_checkpoint)
from mmseg_whitebox.utils.tool_error import ToolError
from mmseg_whitebox.models.segmentors import (BoundedMemoryEncoderDecoder,
                                              resize_argmax_tiled)

#: several overlapping windows on the demo model's 128 x 179 input
SLIDE = {'model.test_cfg.crop_size': (64, 64),
         'model.test_cfg.stride': (48, 48)}


# ------------------------------------------------------ bounded inference
@pytest.mark.parametrize('align_corners', [False, True])
@pytest.mark.parametrize('shapes', [((32, 43), (300, 420)),
                                    ((37, 29), (301, 199)),
                                    ((40, 40), (20, 17))])
def test_tiled_resize_argmax_matches_interpolate(align_corners, shapes):
    (h, w), size = shapes
    torch.manual_seed(0)
    logits = torch.randn(150, h, w)
    ref = torch.nn.functional.interpolate(
        logits[None], size, mode='bilinear', align_corners=align_corners)[0]
    # a few rows per band, so that bands and their borders are exercised
    pred = resize_argmax_tiled(logits, size, align_corners,
                               tile_bytes=150 * size[1] * 4 * 7)
    assert pred.shape == (1, ) + size and pred.dtype == torch.long
    assert (pred == ref.argmax(0, keepdim=True)).double().mean() >= 0.9999
    one = logits[:1]
    binary = resize_argmax_tiled(one, size, align_corners, threshold=0.3)
    ref_one = torch.nn.functional.interpolate(
        one[None], size, mode='bilinear', align_corners=align_corners)[0]
    assert (binary == (ref_one.sigmoid() > 0.3).float()).all()


@pytest.fixture(scope='module')
def bounded_demo():
    return build_model(DEMO_SEGMENTER, None, True, None)


@pytest.mark.parametrize('flip', [None, 'horizontal', 'vertical'])
def test_padding_and_flip_are_undone_as_in_mmseg(bounded_demo, flip):
    assert isinstance(bounded_demo, BoundedMemoryEncoderDecoder)
    torch.manual_seed(1)
    logits = torch.randn(2, 150, 40, 50)
    meta = dict(ori_shape=(97, 131), img_shape=(34, 46),
                padding_size=[1, 3, 2, 4], flip=flip is not None,
                flip_direction=flip)
    samples = [SegDataSample(metainfo=meta) for _ in range(2)]
    ours = bounded_demo.postprocess_result(logits.clone(),
                                           copy.deepcopy(samples))
    ref = EncoderDecoder.postprocess_result(bounded_demo, logits.clone(),
                                            copy.deepcopy(samples))
    for a, b in zip(ours, ref):
        assert torch.equal(a.pred_sem_seg.data, b.pred_sem_seg.data)
        assert a.pred_sem_seg.data.shape == (1, 97, 131)
        # logits stay at the network's resolution, without the padding
        assert a.seg_logits.data.shape == (150, 34, 46)
        assert b.seg_logits.data.shape == (150, 97, 131)


@pytest.mark.parametrize('mode', ['whole', 'slide'])
def test_agreement_with_mmseg_inference(mode):
    """Same weights, same 300x420 image: mmseg's EncoderDecoder and the
    bounded one predict the same class (>= 99.99% of the pixels). Random
    weights often predict one class everywhere; the first seed whose
    prediction holds several classes is used, so agreement is not
    trivial."""
    for seed in range(8):
        same, shapes = agreement(DEMO_SEGMENTER, None, 300, 420, mode,
                                 seed=seed,
                                 options=SLIDE if mode == 'slide' else None)
        if shapes['classes'] > 3:
            break
    assert shapes['classes'] > 3, 'no seed gave a varied prediction'
    assert same >= 0.9999, same
    assert shapes['pred_shape'] == [1, 300, 420]
    assert shapes['default_seg_logits'] == [150, 300, 420]
    assert shapes['bounded_seg_logits'] == [150, 128, 179]


def _float_maps_of_inference(model, image: str, classes: int,
                             size: tuple) -> list:
    """Shapes of the floating tensors of at least ``classes`` x ``size``
    elements that inference of ``image`` creates (slide mode, 64x64
    windows), and the result."""
    from mmseg.apis import inference_model
    saved = copy.deepcopy(model.test_cfg)
    model.test_cfg.update(mode='slide', crop_size=(64, 64), stride=(48, 48))
    try:
        with torch.no_grad():
            result, created = created_tensors(
                lambda: inference_model(model, image))
    finally:
        model.test_cfg = saved
    full = classes * size[0] * size[1]
    return result, [shape for shape, dtype in created
                    if dtype.is_floating_point and math.prod(shape) >= full]


def test_no_full_resolution_float_logits(bounded_demo, tmp_path):
    """A 600x800 image in slide mode: no op of the bounded path creates a
    float tensor as large as the 150 full-resolution class maps (its
    largest are bands of rows); mmseg's own path does, so the check
    sees such a map where one is made."""
    height, width = 600, 800
    image = write_test_image(str(tmp_path / 'mid.jpg'), height, width)
    classes = bounded_demo.decode_head.num_classes
    result, maps = _float_maps_of_inference(bounded_demo, image, classes,
                                            (height, width))
    assert maps == []
    assert result.pred_sem_seg.data.shape == (1, height, width)
    assert result.seg_logits.data.shape[0] == classes
    assert result.seg_logits.data.shape[1:] != (height, width)

    default = build_model(DEMO_SEGMENTER, None, False, None)
    _, maps = _float_maps_of_inference(default, image, classes,
                                       (height, width))
    assert (1, classes, height, width) in maps, maps


def test_large_image_memory_report(tmp_path):
    """What tools/analysis_tools/large_image_memory.py reports: the bounded
    path's peak memory measured in a fresh process, and the agreement of
    the two paths' predictions on a small image, also written as JSON;
    sizes that cannot be an image are refused before any work."""
    json_file = tmp_path / 'memory.json'
    results = large_image_memory_report(
        DEMO_SEGMENTER, size=(160, 224), paths=('bounded', ),
        agreement_size=(48, 64), threads=1, json_file=str(json_file))
    bounded = results['paths']['bounded']
    assert bounded['ok'] and bounded['peak_rss'] > 0
    assert bounded['seg_logits_shape'][0] == 150
    assert 'mmseg' not in results['paths']
    assert results['agreement']['size'] == [48, 64]
    assert 0.99 <= results['agreement']['fraction'] <= 1
    assert json.loads(json_file.read_text()) == json.loads(
        json.dumps(results))
    with pytest.raises(ToolError, match='positive sizes'):
        large_image_memory_report(DEMO_SEGMENTER, size=(0, 224))


# ------------------------------------------------------ crash-safe training
TESTS = osp.dirname(osp.abspath(__file__))
#: the published configs' training loader (persistent workers), 2 workers
TWO_WORKERS = ['train_dataloader.num_workers=2',
               'train_dataloader.persistent_workers=True']


def _counting_config(folder) -> str:
    """The demo Segmenter config, with tests/read_count_plugin.py logging
    every dataset read."""
    config = osp.join(str(folder), 'segmenter_reads.py')
    with open(config, 'w') as f:
        f.write(f'_base_ = [{DEMO_SEGMENTER!r}]\n'
                "custom_imports = dict(imports=['mmseg_whitebox', "
                "'read_count_plugin'], allow_failed_imports=False)\n")
    return config


def _train_cmd(data_root: str, work_dir: str, iters: int,
               resume: bool = False, config: str = DEMO_SEGMENTER,
               batch_size: int = 2, extra: tuple = ()) -> list:
    opts = small_run_options(data_root, iters=iters,
                             batch_size=batch_size) + [
        'default_hooks.checkpoint.interval=2',
        'default_hooks.checkpoint.max_keep_ckpts=-1'] + list(extra)
    return ([sys.executable, 'tools/train.py', config, '--work-dir',
             work_dir] + (['--resume'] if resume else []) +
            ['--cfg-options'] + opts)


def _env(reads: str = '') -> dict:
    """The environment of a run: read_count_plugin importable, logging
    to ``reads``."""
    from read_count_plugin import READS
    return dict(os.environ, PYTHONUNBUFFERED='1', **{READS: reads},
                PYTHONPATH=os.pathsep.join(
                    p for p in (TESTS, os.environ.get('PYTHONPATH')) if p))


def _run(cmd: list, reads: str = '') -> str:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=_env(reads))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def _same_final_checkpoints(straight: str, resumed: str, iters: int) -> None:
    a, b = (torch.load(osp.join(work, f'iter_{iters}.pth'),
                       weights_only=True) for work in (straight, resumed))
    assert a['meta']['iter'] == b['meta']['iter'] == iters
    assert_same(a['state_dict'], b['state_dict'], 'state_dict')
    assert_same(a['optimizer'], b['optimizer'], 'optimizer')
    assert a['optimizer']['state'], 'no optimizer state to compare'


@pytest.mark.slow
def test_sigkill_between_checkpoints_then_resume_is_bitwise_equal(
        tiny_ade, tmp_path):
    """Killed between its checkpoints (iterations 2 and 4), resumed from
    the one at 2: equal to the uninterrupted run, bitwise, with no data
    worker (``num_workers=0``), and having read only the 2 batches it
    trained (4 images; loading the trained batches again would read
    8)."""
    from read_count_plugin import training_reads
    iters = 4
    config = _counting_config(tmp_path)
    straight, crashed = str(tmp_path / 'straight'), str(tmp_path / 'crash')
    _run(_train_cmd(tiny_ade, straight, iters, config=config))

    # the same run, killed once its first checkpoint (iter 2) is complete:
    # mmengine writes last_checkpoint after the checkpoint file
    proc = subprocess.Popen(_train_cmd(tiny_ade, crashed, iters,
                                       config=config), cwd=REPO,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env())
    marker = osp.join(crashed, 'last_checkpoint')
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if osp.isfile(marker):
                with open(marker) as f:
                    if f.read().strip().endswith('iter_2.pth'):
                        break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    assert osp.isfile(osp.join(crashed, 'iter_2.pth'))
    assert not osp.exists(osp.join(crashed, f'iter_{iters}.pth')), \
        'the run was not killed between its two checkpoints'

    reads = str(tmp_path / 'resumed_reads.log')
    _run(_train_cmd(tiny_ade, crashed, iters, resume=True, config=config),
         reads=reads)
    _same_final_checkpoints(straight, crashed, iters)
    assert training_reads(reads) == (iters - 2) * 2


@pytest.mark.slow
def test_resume_with_two_persistent_workers_is_bitwise_equal(tiny_ade,
                                                             tmp_path):
    """The published configs' training loader (persistent data workers, 2
    here), resumed at iteration 6 of 8 from the uninterrupted run's
    checkpoint. Guaranteed: the resumed run ends bitwise equal to the
    uninterrupted one (weights, optimizer state, the random states of the
    process and of its workers), because each worker starts from the
    random state saved with the checkpoint for the batch it makes next;
    and it reads none of the 6 trained batches: at most the 2 it trains
    and the DataLoader's prefetch (2 batches per worker), 6 images where
    loading the trained batches again would read at least 8."""
    from read_count_plugin import training_reads
    iters, at = 8, 6
    config = _counting_config(tmp_path)
    straight, resumed = str(tmp_path / 'straight'), str(tmp_path / 'resumed')
    _run(_train_cmd(tiny_ade, straight, iters, config=config, batch_size=1,
                    extra=TWO_WORKERS))
    reads = str(tmp_path / 'resumed_reads.log')
    log = _run(_train_cmd(
        tiny_ade, resumed, iters, resume=True, config=config, batch_size=1,
        extra=TWO_WORKERS + [f'load_from={straight}/iter_{at}.pth']),
        reads=reads)
    assert f'resumed epoch: 0, iter: {at}' in log
    assert 'not restored' not in log and 'loaded again' not in log
    _same_final_checkpoints(straight, resumed, iters)
    a, b = (torch.load(osp.join(work, f'iter_{iters}.pth'),
                       weights_only=True) for work in (straight, resumed))
    assert len(a['rng_state']['ranks'][0]['data_workers']['workers']) == 2
    assert_same(a['rng_state'], b['rng_state'], 'rng_state')
    assert iters - at <= training_reads(reads) <= iters - at + 2 * 2


# ------------------------------------------------ random states on resume
class _Pipeline:
    """A data iterator whose batches draw from Python's, numpy's and
    torch's global generators, as a data pipeline loaded in the training
    process does."""

    def __iter__(self):
        return self

    def __next__(self):
        return (random.random(), float(np.random.rand()),
                torch.rand(1).item())


def _seed_all(seed: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _fake_runner(iterator=None, iters: int = 0):
    loop = types.SimpleNamespace(dataloader_iterator=iterator, iter=iters)
    return types.SimpleNamespace(
        _resume=True, train_loop=loop, epoch=0, iter=iters,
        logger=logging.getLogger('rng-state-test'))


def _saved(checkpoint: dict) -> dict:
    """``checkpoint`` written and read back as a run does: encoded by
    WeightsOnlyCheckpointHook, loaded weights-only and decoded."""
    buffer = io.BytesIO()
    torch.save(encode_checkpoint(checkpoint), buffer)
    buffer.seek(0)
    return decode_checkpoint(torch.load(buffer, weights_only=True))


def _draws() -> tuple:
    """The model's random draws of a training step."""
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


class _RandomItems(torch.utils.data.Dataset):
    """Items that draw from Python's, numpy's and torch's global
    generators, as a data pipeline loaded in the training process does."""

    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> tuple:
        return next(_Pipeline())


def _replaying_iterator():
    """The compat layer's data iterator over a loader whose sampler it
    cannot advance without data (torch's sequential sampler), so that a
    resume replays the trained batches by loading them."""
    from mmseg_whitebox.compat import ResumableDataIterator
    return ResumableDataIterator(
        torch.utils.data.DataLoader(_RandomItems(), batch_size=None))


def test_random_states_are_restored_once_the_trained_batches_replayed():
    """One process: the states saved with the checkpoint after 2 batches
    are restored after the replay of those 2 batches (a sampler that
    cannot skip), right before the third is loaded, so the third batch and
    the step's own draws are those of the uninterrupted run; restored
    before the replay (at load time), the replay would move them on."""
    from mmengine.hooks import CheckpointHook
    _seed_all()
    batches = _replaying_iterator()
    next(batches), next(batches)
    checkpoint = {}
    RNGStateCheckpointHook().before_save_checkpoint(_fake_runner(),
                                                    checkpoint)
    uninterrupted = next(batches), _draws()
    assert set(checkpoint['rng_state']) == {'world_size', 'ranks'}
    assert checkpoint['rng_state']['world_size'] == 1
    assert set(checkpoint['rng_state']['ranks'][0]) >= {'python', 'numpy',
                                                        'torch'}

    _seed_all()
    runner = _fake_runner(_replaying_iterator(), iters=2)
    original = runner.train_loop.dataloader_iterator
    hook = RNGStateCheckpointHook()
    hook.after_load_checkpoint(runner, _saved(checkpoint))
    hook.before_train(runner)
    original.skip_iter(2)  # the loop's replay: loads the 2 batches
    resumed = next(original), _draws()
    assert resumed == uninterrupted
    assert runner.train_loop.dataloader_iterator is original

    _seed_all()
    restore_random_state(checkpoint['rng_state']['ranks'][0])
    early = _Pipeline()
    next(early), next(early)
    assert (next(early), _draws()) != uninterrupted

    # validation leaves the training's states as they were
    state = capture_random_state()
    hook.before_val(runner)
    torch.rand(5), np.random.rand(), random.random()
    hook.after_val(runner)
    assert_same(capture_random_state(), state)

    # a checkpoint hook's own settings say when it saves
    runner = types.SimpleNamespace(iter=1, max_iters=6, hooks=[
        CheckpointHook(interval=2, by_epoch=False)])
    saves = []
    for runner.iter in range(6):
        saves.append(RNGStateCheckpointHook._saves(runner, by_epoch=False))
    assert saves == [False, True, False, True, False, True]
    assert not RNGStateCheckpointHook._saves(runner, by_epoch=True)


def test_one_process_and_other_world_size_random_states(caplog):
    """A checkpoint saved by one process resumes its states; one saved by
    2 processes restores nothing on 1, with a warning."""
    _seed_all()
    torch.rand(4)
    one = {'rng_state': dict(world_size=1, ranks=[capture_random_state()])}
    expected = torch.rand(3)
    _seed_all()
    runner = _fake_runner()
    hook = RNGStateCheckpointHook()
    hook.after_load_checkpoint(runner, one)
    hook.before_train(runner)  # no replay: restored at once
    assert torch.equal(torch.rand(3), expected)

    two = {'rng_state': dict(world_size=2, ranks=[capture_random_state(),
                                                  None])}
    _seed_all(1)
    before = capture_random_state()
    hook = RNGStateCheckpointHook()
    with caplog.at_level(logging.WARNING, logger='rng-state-test'):
        hook.after_load_checkpoint(runner, two)
    hook.before_train(runner)
    assert_same(capture_random_state(), before)
    assert 'saved by 2 process(es) and this run has 1' in caplog.text

    runner._resume = False  # load_from: nothing restored
    hook.after_load_checkpoint(runner, one)
    hook.before_train(runner)
    assert_same(capture_random_state(), before)


# ----------------------------------- resume without reading trained data
class _RandomReads(torch.utils.data.Dataset):
    """8 items, each read drawing from Python's, numpy's and torch's
    generators as a random transform does; every read (in this process or
    a data worker) appends a line to ``log``."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        with open(self.log, 'a') as f:
            f.write(f'{index}\n')
        return torch.tensor([index, random.random(), np.random.rand(),
                             torch.rand(1).item()], dtype=torch.float64)


class _ToyRunner:
    """What mmengine's ``IterBasedTrainLoop`` and RNGStateCheckpointHook
    use of a Runner: the hook called at each hook point, a checkpoint
    (written and read back as a run does) after every iteration, a model
    whose step records its batch and a random draw of its own (drop
    path)."""

    def __init__(self, hook, resume: bool = False) -> None:
        self.hook, self._resume = hook, resume
        self.logger = logging.getLogger('rng-state-test')
        self.visualizer = types.SimpleNamespace(dataset_meta=None)
        self.val_loop, self.optim_wrapper, self.epoch = None, None, 0
        self.model = types.SimpleNamespace(train=lambda: None,
                                           train_step=self._step)
        self.steps, self.checkpoints = [], {}

    @property
    def iter(self) -> int:
        return self.train_loop.iter

    def _step(self, data, optim_wrapper=None) -> dict:
        self.steps.append((data.tolist(), torch.rand(2).tolist(),
                           float(np.random.rand()), random.random()))
        return {}

    def call_hook(self, name: str, **kwargs) -> None:
        if hasattr(self.hook, name):
            getattr(self.hook, name)(self, **kwargs)
        if name == 'after_train_iter':
            checkpoint = {}
            self.hook.before_save_checkpoint(self, checkpoint)
            self.checkpoints[self.iter + 1] = _saved(checkpoint)


def _toy_training(log: str, workers: int, iters: int,
                  resume_from: dict = None, at: int = 0) -> _ToyRunner:
    """``iters`` iterations of 2 items through mmengine's InfiniteSampler,
    ``workers`` persistent data workers seeded by mmengine's
    ``worker_init_fn``, mmengine's ``IterBasedTrainLoop`` and
    RNGStateCheckpointHook; resumed from ``resume_from`` (saved after
    iteration ``at``) under another seed, so that only what is restored
    can make it equal."""
    import functools

    from mmengine.dataset import InfiniteSampler, worker_init_fn
    from mmengine.runner.loops import IterBasedTrainLoop
    _seed_all(1 if resume_from else 0)
    dataset = _RandomReads(log)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=2, sampler=InfiniteSampler(dataset, seed=0),
        num_workers=workers, persistent_workers=workers > 0,
        worker_init_fn=functools.partial(worker_init_fn, num_workers=workers,
                                         rank=0, seed=0) if workers else None)
    runner = _ToyRunner(RNGStateCheckpointHook(), resume=bool(resume_from))
    runner.train_loop = IterBasedTrainLoop(runner, loader, max_iters=iters)
    if resume_from:
        runner.hook.after_load_checkpoint(runner, resume_from)
        runner.train_loop._iter = at
    runner.train_loop.run()
    del runner.train_loop, loader  # the workers stop: every read is logged
    return runner


def _reads(log) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.parametrize('workers', [0, 2])
def test_resume_reads_no_trained_batch_and_is_bitwise_equal(workers,
                                                            tmp_path):
    """A resume at iteration k reads none of the k trained batches: the
    sampler is advanced (the compat layer's ResumableDataIterator), and
    the random states restored (RNGStateCheckpointHook: the process's;
    with workers, each worker's state before the batch it makes next), so
    every later batch and every model draw equal the uninterrupted run's,
    bitwise. Without workers, a resume reads exactly the batches it
    trains; with them, at most the DataLoader's prefetch more
    (prefetch_factor x workers batches). Resumed at 1 (before each worker
    made a batch: states from the workers' seeds) and at 3 (from the
    states the batches carried)."""
    iters, batch = 5, 2
    straight = _toy_training(str(tmp_path / 'straight.log'), workers, iters)
    assert len(straight.steps) == iters
    for at in (1, 3):
        log = tmp_path / f'resumed_{at}.log'
        resumed = _toy_training(str(log), workers, iters,
                                straight.checkpoints[at], at)
        assert resumed.steps == straight.steps[at:], at
        bound = (iters - at) * batch + (2 * workers * batch)
        assert (iters - at) * batch <= _reads(log) <= bound, at
        if not workers:
            assert _reads(log) == (iters - at) * batch


def test_resume_with_another_number_of_workers_says_so(tmp_path,
                                                       monkeypatch):
    """Resumed with another number of data workers than the checkpoint
    was saved with, the workers start from their seeds (their random
    transforms are not the uninterrupted run's; the data order is), and
    a warning says so, once."""
    from mmseg_whitebox.compat import resume
    said = []
    monkeypatch.setattr(resume, '_log', said.append)
    runs = {w: _toy_training(str(tmp_path / f'{w}.log'), w, 3)
            for w in (0, 2)}
    for saved, resumed in ((0, 2), (2, 0)):
        said.clear()
        run = _toy_training(str(tmp_path / f'{saved}_{resumed}.log'),
                            resumed, 3, runs[saved].checkpoints[1], 1)
        assert len(said) == 1, said
        assert ('start from their seeds' if saved == 0 else
                'saved by 2 workers, this run has 0') in said[0]
        # the same items in the same order, drawn otherwise
        assert [[row[0] for row in step[0]] for step in run.steps] == \
            [[row[0] for row in step[0]] for step in runs[saved].steps[1:]]


# ------------------------------------------------ the checkpoint reported
# The released code reports its final model (segm/train.py:161,250-261
# overwrite checkpoint.pth every epoch; segm/eval/miou.py:188,217 evaluates
# it), and the validation split is the split the papers report: no config
# selects a checkpoint by validation mIoU, and every checkpoint hook keeps
# the final checkpoint.
CONFIG_FILES = sorted(
    glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True))


def _names(path: str, name: str) -> bool:
    """Whether the config file sets ``name`` anywhere: as a keyword, a
    dict key or a top-level variable (comments do not count)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == name:
            return True
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == name
                for k in node.keys):
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(
                node.ctx, ast.Store):
            return True
    return False


class _Runner:
    """What mmengine's CheckpointHook asks of a runner during training:
    checkpoints are empty files."""

    def __init__(self, work_dir: str, max_iters: int) -> None:
        self.work_dir, self.max_iters = work_dir, max_iters
        self.iter = self.epoch = 0
        self.logger = logging.getLogger('checkpoint-hook-test')
        # a hub of its own: the hook keeps its checkpoint list there
        self.message_hub = MessageHub.get_instance(f'hook-test:{work_dir}')

    def save_checkpoint(self, out_dir: str, filename: str, *args,
                        **kwargs) -> None:
        open(osp.join(out_dir, filename), 'w').close()


def _kept_after_training(hook_cfg: dict, max_iters: int,
                         work_dir: str) -> List[str]:
    """The checkpoint files mmengine's CheckpointHook, set as
    ``hook_cfg``, leaves after ``max_iters`` iterations."""
    from mmengine.hooks import CheckpointHook
    os.makedirs(work_dir)
    hook = CheckpointHook(**{k: v for k, v in hook_cfg.items()
                             if k != 'type'})
    runner = _Runner(work_dir, max_iters)
    hook.before_train(runner)
    for i in range(max_iters):
        runner.iter = i
        hook.after_train_iter(runner, i)
    hook.after_train(runner)
    return sorted(f for f in os.listdir(work_dir) if f.endswith('.pth'))


def test_no_config_selects_a_checkpoint_on_the_reported_split(tmp_path):
    assert len(CONFIG_FILES) > 60  # every config and base, demos included
    assert [p for p in CONFIG_FILES if _names(p, 'save_best')] == []
    # sensitivity: the scan finds it in a hook like the published one
    odd = tmp_path / 'odd.py'
    odd.write_text("# save_best in a comment does not count\n"
                   "default_hooks = dict(checkpoint=dict(\n"
                   "    type='CheckpointHook', save_best='mIoU'))\n")
    assert _names(str(odd), 'save_best')
    odd.write_text("default_hooks = {'checkpoint': {'save_best': 'mIoU'}}\n")
    assert _names(str(odd), 'save_best')
    odd.write_text('# save_best in a comment does not count\n')
    assert not _names(str(odd), 'save_best')


def test_every_checkpoint_hook_keeps_the_final_checkpoint(tmp_path):
    """Every config file that sets the checkpoint hook or the schedule's
    length (the schedules; the other configs inherit both), run through
    mmengine's CheckpointHook for its whole schedule, leaves
    ``iter_<max_iters>.pth``."""
    hooks = [p for p in CONFIG_FILES if _names(p, 'default_hooks')]
    assert sorted(osp.basename(p) for p in hooks) == [
        'schedule_160k.py', 'schedule_80k.py', 'schedule_demo.py']
    runs = {}
    for path in CONFIG_FILES:
        if _names(path, 'default_hooks') or _names(path, 'train_cfg'):
            cfg = Config.fromfile(path)
            runs[osp.basename(path)] = (
                cfg.default_hooks.checkpoint.to_dict(),
                cfg.train_cfg.max_iters)
    assert len(runs) == 4, sorted(runs)
    for name, (hook, iters) in runs.items():
        kept = _kept_after_training(hook, iters, str(tmp_path / name))
        assert f'iter_{iters}.pth' in kept, (name, kept)
        assert len(kept) <= hook['max_keep_ckpts'], (name, kept)
    assert _kept_after_training(*runs['schedule_160k.py'],
                                str(tmp_path / 'ade')) == [
        'iter_144000.pth', 'iter_160000.pth', 'iter_161728.pth']
    # sensitivity: without save_last the final iteration (not a multiple
    # of the interval) is not saved
    hook, iters = runs['schedule_160k.py']
    kept = _kept_after_training(dict(hook, save_last=False), iters,
                                str(tmp_path / 'no-last'))
    assert 'iter_161728.pth' not in kept


@pytest.mark.parametrize('config', [
    DEMO_SEGMENTER,
    'configs/segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py',
    'configs/mssa/mssa_vit-s_8xb1-80k_cityscapes-768x768.py'])
def test_configs_keep_the_final_checkpoint(config):
    """A published config resolves to the schedule's hook."""
    hook = Config.fromfile(osp.join(REPO, config)).default_hooks.checkpoint
    assert 'save_best' not in hook and hook.get('save_last', True)
    assert hook.max_keep_ckpts >= 1


def _held_out_config_text() -> str:
    """The config of docs/training.md#selecting-a-checkpoint."""
    with open(osp.join(REPO, 'docs', 'training.md')) as f:
        text = f.read()
    section = text[text.index('### Selecting a checkpoint'):]
    return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def test_held_out_selection_config_of_the_docs(tiny_ade, tmp_path):
    """The documented config trains on the rest of the training set,
    validates and selects on the held-out part and tests on the
    validation split."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import DATASETS
    root = str(tmp_path / 'ADEChallengeData2016')
    shutil.copytree(tiny_ade, root)
    names = sorted(f[:-4] for f in os.listdir(
        osp.join(root, 'images', 'training')))
    os.makedirs(osp.join(root, 'splits'))
    for file, part in [('heldout.txt', names[:2]), ('train.txt', names[2:])]:
        with open(osp.join(root, 'splits', file), 'w') as f:
            f.write(''.join(n + '\n' for n in part))
    text = _held_out_config_text()
    base = re.search(r"_base_ = '\.\./(.*)'", text).group(1)
    config = tmp_path / 'heldout.py'
    config.write_text(text.replace(
        f"'../{base}'", repr(osp.join(REPO, 'configs', base))))
    cfg = Config.fromfile(str(config))
    assert cfg.default_hooks.checkpoint.save_best == 'mIoU'
    init_default_scope('mmseg')
    seen = {}
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        dataset = DATASETS.build(dict(cfg[loader].dataset, data_root=root))
        seen[loader] = sorted(osp.relpath(d['img_path'], root)
                              for d in dataset.load_data_list())
    training = [osp.join('images', 'training', n + '.jpg') for n in names]
    assert seen['train_dataloader'] == training[2:]
    assert seen['val_dataloader'] == training[:2]
    assert seen['test_dataloader'] == sorted(
        osp.join('images', 'validation', f) for f in os.listdir(
            osp.join(root, 'images', 'validation')))
