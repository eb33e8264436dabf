"""The demo models behind ``make demo`` (``tools/misc/demo.py``) and the
``--cfg-options`` it runs them with.

Every demo model but three is a head on the same CPU-sized ViT encoder
(``configs/*/*_vit-demo_*_synthade-*``); ``cbt``, ``crate`` and ``tost``
are the CBSA head on white-box encoders of the same size. All train on the
synthetic ADE20K-layout data.
"""
from __future__ import annotations

from typing import Dict, List, Optional

#: name -> config (relative to the repository root); every head on the
#: same ViT encoder, and 'cbt', 'crate', 'tost' on white-box encoders
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
}
#: what ``make demo`` trains unless told otherwise
DEFAULT_MODELS = ('segmenter', 'cbsa', 'cbsa-rigorous')


def data_options(data_root: str) -> List[str]:
    """``--cfg-options`` pointing every dataloader at ``data_root``."""
    return [f'{loader}.dataset.data_root={data_root}'
            for loader in ('train_dataloader', 'val_dataloader',
                           'test_dataloader')]


def schedule_options(iters: Optional[int]) -> List[str]:
    """``--cfg-options`` for a demo schedule of ``iters`` iterations (none:
    the configs' own), warm-up and checkpoint scaled along."""
    if iters is None:
        return []
    warmup = max(1, min(50, iters // 4))
    return [f'train_cfg.max_iters={iters}',
            f'train_cfg.val_interval={iters}',
            f'param_scheduler.0.end={warmup}',
            f'param_scheduler.1.begin={warmup}',
            f'param_scheduler.1.end={iters}',
            f'default_hooks.checkpoint.interval={iters}']


def freeze_options(freeze: bool) -> List[str]:
    """``--cfg-options`` giving every encoder parameter learning rate and
    weight decay 0 (``--freeze-encoder``)."""
    if not freeze:
        return []
    key = 'optim_wrapper.paramwise_cfg.custom_keys.backbone'
    return [f'{key}.lr_mult=0.0', f'{key}.decay_mult=0.0']
