"""A test-only plugin that puts a fault into a tool run, for
tests/test_reliability.py: a bug (an exception no input causes), a run
that waits at a gate, or a checkpoint save killed half-way.

A config imports it (``custom_imports = dict(imports=['fault_plugin'])``,
with this folder on ``PYTHONPATH``); :data:`FAULT` in the environment
says which fault, as ``<name>`` or ``<name>:<argument>``:

* ``head-forward``: ``CBSAHead.forward`` builds a module with a keyword
  it does not take (``TypeError: Dropout.__init__() got an unexpected
  keyword argument 'pp'``), as a typo in the project's code would;
* ``evaluation:<ExceptionType>``: computing the test metrics raises
  ``<ExceptionType>`` (a builtin, e.g. ``KeyError``);
* ``export-metadata:<ExceptionType>``: assembling an ONNX graph's
  deployment metadata raises it;
* ``converter:<ExceptionType>``: checking converted weights against the
  config's backbone raises it;
* ``parity``: the PyTorch model is changed after the export, so the
  graph disagrees with it (a failed parity check);
* ``gate:<folder>``: computing the test metrics first creates
  ``<folder>/ready``, then waits until ``<folder>/go`` exists;
* ``kill-save:<n>``: the ``n``-th checkpoint file written is cut off
  half-way, and the process killed (``SIGKILL``) right then;
* ``kill-last-checkpoint:<n>``: the process is killed right after the
  ``n``-th opening for writing of a file named like ``last_checkpoint``
  (mmengine's name for the latest checkpoint; a temporary file of that
  name too) has emptied it.
"""
import builtins
import os
import os.path as osp
import signal
import time

#: the environment variable that names the fault
FAULT = 'MMSEG_WHITEBOX_TEST_FAULT'
#: how long a gate waits at most (a test that never opens it fails)
GATE_SECONDS = 300


def _raiser(kind: str):
    error = getattr(builtins, kind)

    def fail(*args, **kwargs):
        raise error(f'injected {kind} (tests/fault_plugin.py)')

    return fail


def _head_forward() -> None:
    import torch.nn as nn

    from mmseg_whitebox.models.decode_heads.cbsa_head import CBSAHead

    def forward(self, inputs):
        nn.Dropout(pp=0.1)  # the injected typo: the keyword is ``p``

    CBSAHead.forward = forward


def _evaluation(kind: str) -> None:
    from mmseg.evaluation.metrics import IoUMetric
    IoUMetric.compute_metrics = _raiser(kind)


def _export_metadata(kind: str) -> None:
    from mmseg_whitebox.deployment.onnx_export import metadata
    metadata.pipeline_resizes = _raiser(kind)


def _converter(kind: str) -> None:
    from mmseg_whitebox.converters import state_dicts
    state_dicts.check_pretrained = _raiser(kind)


def _parity() -> None:
    import torch

    from mmseg_whitebox.deployment import onnx_export
    check = onnx_export.onnx_parity

    def changed_model_parity(model, *args, **kwargs):
        with torch.no_grad():
            model.decode_head.mask_norm.weight.neg_()
        return check(model, *args, **kwargs)

    onnx_export.onnx_parity = changed_model_parity


def _gate(folder: str) -> None:
    from mmseg.evaluation.metrics import IoUMetric
    compute = IoUMetric.compute_metrics

    def wait_at_the_gate(self, results):
        open(osp.join(folder, 'ready'), 'w').close()
        waited = 0.0
        while not osp.exists(osp.join(folder, 'go')):
            if waited > GATE_SECONDS:
                raise TimeoutError('the test never opened the gate')
            time.sleep(0.05)
            waited += 0.05
        return compute(self, results)

    IoUMetric.compute_metrics = wait_at_the_gate


def _kill_save(count: int) -> None:
    from mmengine.fileio.backends.local_backend import LocalBackend
    put = LocalBackend.put
    saved = []

    def put_and_die(self, obj, filepath):
        if str(filepath).endswith('.pth'):
            saved.append(filepath)
            if len(saved) == count:
                with open(filepath, 'wb') as f:
                    f.write(obj[:len(obj) // 2])
                    f.flush()
                    os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
        return put(self, obj, filepath)

    LocalBackend.put = put_and_die


def _kill_last_checkpoint(count: int) -> None:
    open_file = builtins.open
    opened = []

    def open_and_die(file, mode='r', *args, **kwargs):
        handle = open_file(file, mode, *args, **kwargs)
        if 'w' in mode and 'last_checkpoint' in osp.basename(str(file)):
            opened.append(file)
            if len(opened) == count:
                os.kill(os.getpid(), signal.SIGKILL)
        return handle

    builtins.open = open_and_die


def install() -> None:
    """Put the fault :data:`FAULT` names in place."""
    name, _, argument = os.environ.get(FAULT, '').partition(':')
    faults = {
        'head-forward': lambda: _head_forward(),
        'evaluation': lambda: _evaluation(argument),
        'export-metadata': lambda: _export_metadata(argument),
        'converter': lambda: _converter(argument),
        'parity': lambda: _parity(),
        'gate': lambda: _gate(argument),
        'kill-save': lambda: _kill_save(int(argument)),
        'kill-last-checkpoint': lambda: _kill_last_checkpoint(int(argument)),
    }
    if name:
        faults[name]()


install()
