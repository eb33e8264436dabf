"""What a noise sweep sweeps, declared once: :class:`NoiseSweepOptions`.

Each field is a setting of :func:`~.noise_robustness.run_noise_sweep`; a
field with ``help`` in its metadata is also a flag of
``tools/noise_robustness.py`` of the same name
(:func:`mmseg_whitebox.cli.add_dataclass_args`).
"""
from __future__ import annotations

import math
import numbers
import os.path as osp
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from mmseg_whitebox.utils.tool_error import InputError
from .groups import GROUPS
from .perturbation import MODES
from .selection import NAMED_TARGETS

# the CBSA paper's grid (Fig. 8)
PAPER_SIGMAS = (1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 1e-2, 2e-2, 3e-2, 4e-2, 5e-2,
                0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _layer_index(value: Any) -> Optional[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r'\s*-?\d+\s*', value):
        return int(value)
    return None


def layer_choice(layers: Any) -> Union[None, str, List[int]]:
    """``layers`` as the sweep takes it -- None (the whole target),
    ``'each'`` or a list of layer indices -- from what a user gives (also
    ``['each']`` and indices as text)."""
    if layers is None or layers == 'each':
        return layers
    entries = [layers] if isinstance(layers, (str, int)) else list(layers)
    if entries == ['each']:
        return 'each'
    if 'each' in entries:
        raise InputError('--layers: "each" or layer indices, not both')
    bad = [v for v in entries if _layer_index(v) is None]
    if bad or not entries:
        raise InputError(
            '--layers takes "each" or layer indices (printed by the tool), '
            f'not {", ".join(repr(v) for v in bad) or "nothing"}')
    return [_layer_index(v) for v in entries]


@dataclass
class NoiseSweepOptions:
    """What to sweep and how: the options of ``tools/noise_robustness.py``
    (``ablation=False`` is ``--no-ablation``); the fields without ``help``
    are the flags every tool shares. Checked when made (:meth:`check`)."""
    sigmas: Sequence[float] = field(
        default=tuple(PAPER_SIGMAS), metadata=dict(
            help='noise standard deviations (default: the CBSA paper\'s grid, '
            '1e-3 ... 1.0)'))
    draws: int = field(default=3, metadata=dict(
        help='noise draws per sigma (default 3)'))
    seed: int = field(default=0, metadata=dict(
        help='seed of the first draw (draw i uses seed+i)'))
    target: str = field(default='decoder-attention', metadata=dict(
        help=', '.join(NAMED_TARGETS) + ' (the first is the default), or a '
        'regular expression over parameter names'))
    layers: Optional[Union[str, List[int]]] = field(
        default=None, metadata=dict(
            help='perturb one attention layer at a time (its attention '
            'parameters within the target, also with --target decoder): '
            '"each", or layer indices (printed by the tool)', nargs='+'))
    mode: str = field(default='absolute', metadata=dict(
        help='absolute sigma (the paper\'s), or relative to each '
        'tensor\'s RMS',
        choices=MODES))
    out: Optional[str] = field(default=None, metadata=dict(
        help='results folder (default: work_dirs/noise_robustness/'
        '<config>_<target>_<mode>)', metavar='DIR'))
    label: Optional[str] = field(default=None, metadata=dict(
        help='legend label (default: config name)'))
    resume: bool = field(default=False, metadata=dict(
        help='continue the sweep in --out, skipping finished points'))
    ablation: bool = field(default=True, metadata=dict(
        help='skip the attention-removed reference'))
    compare: Sequence[str] = field(default=(), metadata=dict(
        help='other sweep folders to overlay in robustness.png'))
    groups: Optional[Sequence[str]] = field(default=None, metadata=dict(
        help='also sweep each parameter group of the attention layers alone '
        '(all groups the head has, or those named: ' + ', '.join(GROUPS)
        + ')', nargs='*', choices=GROUPS, metavar='GROUP'))
    subspace_angles: bool = field(default=False, metadata=dict(
        help='measure, per subspace attention layer and sigma, the principal '
        'angles between span(U_k) and span(U_k + noise) and the relative '
        'change of the attention update (CBSA, MSSA, TSSA heads)'))
    angle_images: int = field(default=4, metadata=dict(
        help='test images the update change is measured on (default 4)'))
    max_heads: int = field(default=8, metadata=dict(
        help='perturbed copies of the decode head evaluated together in one '
        'pass over the data (shared-encoder sweep; default 8; bounds the '
        'memory)'))
    shared_encoder: bool = field(default=True, metadata=dict(
        help='evaluate one noise draw at a time, encoder included, even for '
        'decode-head noise'))
    cfg_options: Optional[Dict[str, Any]] = None
    work_dir: Optional[str] = None
    launcher: str = 'none'
    #: 'cuda' or 'cpu'; None: the GPU when one is visible (a launched
    #: sweep without one needs 'cpu')
    device: Optional[str] = None
    allow_partial_checkpoint: bool = False
    allow_nonfinite_weights: bool = False
    #: a progress bar (library only)
    progress: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Check every setting that needs no model or file (call it again
        after changing a field); normalises ``layers``.

        Raises:
            InputError: naming the flag.
        """
        if self.mode not in MODES:
            raise InputError(f'--mode must be one of {", ".join(MODES)}, '
                             f'got {self.mode!r}')
        for flag, value in (('--draws', self.draws),
                            ('--angle-images', self.angle_images),
                            ('--max-heads', self.max_heads)):
            if isinstance(value, bool) or not isinstance(
                    value, numbers.Integral) or value < 1:
                raise InputError(f'{flag} must be a whole number >= 1, '
                                 f'got {value!r}')
        bad = [s for s in self.sigmas
               if isinstance(s, bool) or not isinstance(s, numbers.Real)
               or not (math.isfinite(s) and s >= 0)]
        if bad or not len(self.sigmas):
            raise InputError(
                '--sigmas must be finite and >= 0 (0 is the clean model), got '
                f'{", ".join(repr(s) for s in bad) or "none"}: e.g. --sigmas '
                '0.001 0.01 0.1')
        self.layers = layer_choice(self.layers)

    def legend_label(self, config: str) -> str:
        """The legend label: ``label``, or the config's file name."""
        return self.label or osp.splitext(osp.basename(config))[0]

    def out_dir(self, config: str) -> str:
        """``out``, or ``work_dirs/noise_robustness/<config>_<target>_
        <mode>``."""
        if self.out:
            return self.out
        name = osp.splitext(osp.basename(config))[0]
        tag = self.target if self.target in NAMED_TARGETS else 'regex'
        return osp.join('work_dirs', 'noise_robustness',
                        f'{name}_{tag}_{self.mode}')
