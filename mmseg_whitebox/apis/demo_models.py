"""The demo models behind ``make demo`` (:func:`~.demo.run_demo`) and the
config options it runs them with.

Every demo model but ``cbt``, ``crate`` and ``tost`` (the CBSA head on
white-box encoders) is a head on the same CPU-sized ViT encoder, mmseg's
classic attention heads (:data:`MMSEG_ATTENTION_HEADS`) among them, all
trained on the synthetic ADE20K-layout data.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

#: name -> config (relative to the repository root)
DEMO_MODELS: Dict[str, str] = {
    'segmenter': 'configs/segmenter/'
    'segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py',
    'cbsa': 'configs/cbsa/cbsa_vit-demo_1xb8-800iter_synthade-128x128.py',
    'cbsa-rigorous': 'configs/cbsa/'
    'cbsa-rigorous_vit-demo_1xb8-800iter_synthade-128x128.py',
    'mssa': 'configs/mssa/mssa_vit-demo_1xb8-800iter_synthade-128x128.py',
    'mssa-ca': 'configs/mssa/'
    'mssa-ca_vit-demo_1xb8-800iter_synthade-128x128.py',
    'tssa': 'configs/tssa/tssa_vit-demo_1xb8-800iter_synthade-128x128.py',
    # white-box encoders (CBSA + ISTA, MSSA + ISTA, TSSA + MLP) under the
    # CBSA head
    'cbt': 'configs/cbsa/cbsa_cbt-demo_1xb8-800iter_synthade-128x128.py',
    'crate': 'configs/cbsa/cbsa_crate-demo_1xb8-800iter_synthade-128x128.py',
    'tost': 'configs/cbsa/cbsa_tost-demo_1xb8-800iter_synthade-128x128.py',
    # mmseg's classic attention decode heads (MMSEG_ATTENTION_HEADS)
    'nonlocal': 'configs/attention_heads/'
    'nonlocal_vit-demo_1xb8-800iter_synthade-128x128.py',
    'danet': 'configs/attention_heads/'
    'danet_vit-demo_1xb8-800iter_synthade-128x128.py',
    'isanet': 'configs/attention_heads/'
    'isanet_vit-demo_1xb8-800iter_synthade-128x128.py',
    'ann': 'configs/attention_heads/'
    'ann_vit-demo_1xb8-800iter_synthade-128x128.py',
}
#: mmseg's NLHead, DAHead, ISAHead, ANNHead (configs/attention_heads/)
MMSEG_ATTENTION_HEADS = ('nonlocal', 'danet', 'isanet', 'ann')
#: what ``make demo`` trains unless told otherwise
DEFAULT_MODELS = ('segmenter', 'cbsa', 'cbsa-rigorous')


def data_options(data_root: str) -> Dict[str, Any]:
    """Options pointing every dataloader at ``data_root``."""
    return {f'{loader}.dataset.data_root': data_root
            for loader in ('train_dataloader', 'val_dataloader',
                           'test_dataloader')}


def schedule_options(iters: Optional[int]) -> Dict[str, Any]:
    """Options for a demo schedule of ``iters`` iterations (none: the
    configs' own), warm-up and checkpoint scaled along."""
    if iters is None:
        return {}
    warmup = max(1, min(50, iters // 4))
    return {'train_cfg.max_iters': iters,
            'train_cfg.val_interval': iters,
            'param_scheduler.0.end': warmup,
            'param_scheduler.1.begin': warmup,
            'param_scheduler.1.end': iters,
            'default_hooks.checkpoint.interval': iters}


def command_line(options: Dict[str, Any]) -> List[str]:
    """``options`` as the words after a tool's ``--cfg-options``."""
    return [f'{key}={value}' for key, value in options.items()]
