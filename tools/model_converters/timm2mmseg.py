"""Convert a timm ViT checkpoint for mmseg's VisionTransformer or this
project's WhiteBoxViT.

    python tools/model_converters/timm2mmseg.py SRC DST [CONFIG]
        [--to white-box]

SRC: a timm ``vit_{tiny,small,base,large}_patch16_*`` state dict
(``.pth``, read weights-only, or ``.safetensors``), or the JAX ``.npz``
timm 0.4.12 downloads for them (the AugReg files the released Segmenter,
CBT and DEPICT code start from; read as plain arrays, never unpickled;
table in docs/models.md#pretrained-encoder-weights). DST: a weights-only
checkpoint for ``init_cfg=dict(type='Pretrained', checkpoint=DST)`` of a
backbone with ``patch_bias=True`` (the patch embedding keeps its bias).
``--to white-box`` writes WhiteBoxViT keys, for the CBSA-adapted ViTs
(``configs/*/*_cbsa-vit-*``: every attention made linear with CBSA over
the pretrained query/key/value projections); SRC may then also be an
mmseg ViT checkpoint (mmseg's converted Segmenter weights). The
classification head is dropped; a key that cannot be mapped stops the
conversion, with the list of such keys, and nothing is written; so does,
with CONFIG, a result that does not fit that config's backbone
exactly (the check its pretrained loading makes).
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat first)
from mmseg_whitebox.cli import run_tool
from mmseg_whitebox.converters.state_dicts import convert_file
from mmseg_whitebox.converters.vit import timm_vit_to_mmseg, vit_to_white_box

CONVERTERS = {'vit': timm_vit_to_mmseg, 'white-box': vit_to_white_box}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help='timm ViT state dict (.pth or .safetensors) '
                   "or JAX ViT weights (AugReg .npz, as timm 0.4.12's "
                   'default_cfgs download them)')
    p.add_argument('dst', help='where to write the mmseg checkpoint')
    p.add_argument('--to', choices=list(CONVERTERS), default='vit',
                   help="the backbone: mmseg's VisionTransformer (vit, "
                   'default) or WhiteBoxViT (white-box)')
    p.add_argument('config', nargs='?', metavar='CONFIG',
                   help='the config that will load DST: check that the '
                   'weights fit its backbone before writing')
    args = p.parse_args(argv)
    # bad input is a ToolError raised where it is found
    print(convert_file(args.src, args.dst, CONVERTERS[args.to], args.config))


if __name__ == '__main__':
    run_tool(main)
