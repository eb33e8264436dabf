"""Write checkpoints that load with ``torch.load(weights_only=True)``."""
from __future__ import annotations

from typing import Any, Dict

from mmengine.hooks import Hook
from mmseg.registry import HOOKS

from mmseg_whitebox.utils.checkpoint_codec import encode_checkpoint


@HOOKS.register_module()
class WeightsOnlyCheckpointHook(Hook):
    """Store a checkpoint's non-tensor training state as plain data.

    Runs last before every save (lowest priority, so state other hooks add
    is covered too). Loading needs nothing from this hook: the weights-only
    loader installed by :mod:`mmseg_whitebox.compat` decodes the state, so
    ``tools/test.py``, ``--resume``, ``load_from`` and ``mmseg.apis`` read
    these files with unpickling of arbitrary objects switched off.
    """

    priority = 'LOWEST'

    def before_save_checkpoint(self, runner: Any,
                               checkpoint: Dict[str, Any]) -> None:
        encoded = encode_checkpoint(checkpoint)
        checkpoint.clear()
        checkpoint.update(encoded)
