"""Convert a timm ViT checkpoint into mmseg's VisionTransformer keys.

    python tools/model_converters/timm2mmseg.py SRC DST

SRC: a timm ``vit_{tiny,small,base,large}_patch16_*`` state dict
(``.pth``, read weights-only, or ``.safetensors``). DST: a weights-only
checkpoint for ``init_cfg=dict(type='Pretrained', checkpoint=DST)`` of a
backbone with ``patch_bias=True`` (the patch embedding keeps its bias).
The classification head is dropped; a key that cannot be mapped stops the
conversion, with the list of such keys, and nothing is written.
"""
import argparse
import os
import os.path as osp

import torch

import mmseg_whitebox  # noqa: F401  (compat first)
from mmseg_whitebox.models.backbones.vit_conversion import timm_vit_to_mmseg
from mmseg_whitebox.utils.cli import ToolError, run_tool


def load_state_dict(path: str) -> dict:
    if not osp.isfile(path):
        raise ToolError(f'{path!r} does not exist')
    if path.endswith('.safetensors'):
        from safetensors.torch import load_file
        return load_file(path)
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as exc:  # torch raises many kinds for a foreign file
        raise ToolError(f'{path!r} cannot be read weights-only as a torch '
                        f'state dict ({type(exc).__name__}: {exc})') from exc
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(
                checkpoint.get(key), dict):
            checkpoint = checkpoint[key]
    if not isinstance(checkpoint, dict):
        raise ToolError(f'{path!r} holds a {type(checkpoint).__name__}, not '
                        'a state dict')
    return checkpoint


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help='timm ViT state dict (.pth or .safetensors)')
    p.add_argument('dst', help='where to write the mmseg checkpoint')
    args = p.parse_args(argv)
    converted, dropped, unmapped = timm_vit_to_mmseg(
        load_state_dict(args.src))
    if unmapped:
        raise ToolError(f'{len(unmapped)} keys of {args.src} cannot be '
                        f'mapped (is it a timm ViT?): {", ".join(unmapped)}')
    os.makedirs(osp.dirname(osp.abspath(args.dst)), exist_ok=True)
    torch.save(dict(state_dict=converted), args.dst)
    print(f'wrote {args.dst}: {len(converted)} tensors'
          + (f'; dropped the classifier ({", ".join(dropped)})'
             if dropped else ''))


if __name__ == '__main__':
    run_tool(main)
