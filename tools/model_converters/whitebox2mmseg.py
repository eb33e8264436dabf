"""Convert a published CBT / CRATE / ToST classification checkpoint for
this project's WhiteBoxViT.

    python tools/model_converters/whitebox2mmseg.py SRC DST [CONFIG]
        [--layout L]

SRC: a state dict of the CBSA repository's ``CBSA_image_classification``
models (CBT and its CRATE/ToST variants; convolutional stem), of the
CRATE repository's models (normalised linear patch embedding) or of the
ToST repository's ``tost_cab_*`` models (their self-attention blocks and
stem, layer scales folded in; the Fourier positions, CLS token and
class-attention layers are not converted), read weights-only;
``--layout`` (default: detected) names which. DST: a weights-only
checkpoint for ``init_cfg=dict(type='Pretrained', checkpoint=DST)`` of a
WhiteBoxViT with the matching ``stem_cfg`` (``ConvPatchStem`` /
``NormedPatchEmbed``), operators and sizes. The
classifier is dropped; a key that cannot be mapped stops the conversion,
with the list of such keys, and nothing is written; so does, with
CONFIG, a result that does not fit that config's backbone exactly
(the check its pretrained loading makes). The CBSA repository's CRATE and
ToST variants are MSSA/TSSA + ISTA at CBT's widths, not this project's
``crate_*``/``tost_*`` (the CRATE and ToST papers' sizes): their config
sets e.g. ``backbone=dict(_base_.cbt_t, stem_cfg=_base_.cbt_stem,
attn_cfg=dict(type='TSSA', num_heads=3, head_dim=64))``.
"""
import argparse
from functools import partial

import mmseg_whitebox  # noqa: F401  (compat first)
from mmseg_whitebox.cli import run_tool
from mmseg_whitebox.converters.state_dicts import convert_file
from mmseg_whitebox.converters.white_box import LAYOUTS, white_box_to_mmseg


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help='published classification state dict')
    p.add_argument('dst', help='where to write the mmseg checkpoint')
    p.add_argument('--layout', choices=['auto'] + list(LAYOUTS),
                   default='auto',
                   help='cbsa: the CBSA repository (CBT, convolutional '
                   'stem); crate: the CRATE repository; tost: the ToST '
                   'repository; auto: detected')
    p.add_argument('config', nargs='?', metavar='CONFIG',
                   help='the config that will load DST: check that the '
                   'weights fit its backbone before writing')
    args = p.parse_args(argv)
    # bad input is a ToolError raised where it is found
    print(convert_file(args.src, args.dst,
                       partial(white_box_to_mmseg, layout=args.layout),
                       args.config))


if __name__ == '__main__':
    run_tool(main)
