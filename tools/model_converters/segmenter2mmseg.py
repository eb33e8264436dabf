"""Convert a published Segmenter, DEPICT or CBT checkpoint for this
project's configs.

    python tools/model_converters/segmenter2mmseg.py SRC DST [CONFIG] \
        [--variant VARIANT_YML] [--out-config FILE] \
        [--released-gradients]

SRC: a checkpoint of the Segmenter codebase (``rstrudel/segmenter``) or
of its DEPICT (``QishuaiWen/DEPICT``, SA or CA) and CBT
(``QishuaiWen/CBSA``, ``CBSA_semantic_segmentation``) forks: a
``checkpoint.pth`` with the model under ``model`` (``encoder.*``,
``decoder.*``), read weights-only. ``--variant`` (default: the
``variant.yml`` beside SRC, as the released code reads it): its
``net_kwargs`` (encoder sizes, heads, image size, patch size, ``n_cls``,
decoder kwargs) are checked against the weights; without one, the sizes
come from the weights alone.

The decoder is recognised from the keys and the config picked from this
project's (CONFIG to choose): the Segmenter mask decoder goes to
mmseg's ``SegmenterMaskTransformerHead``, the linear one to ``FCNHead``
(``num_convs=0``), DEPICT to ``MSSAHead`` (``mode='sa'``/``'ca'``), CBT to
``CBSAHead``; the encoder always to mmseg's ``VisionTransformer``. What
the checkpoint needs beyond the config (sizes, ``patch_bias=True``, the
released LayerNorm eps 1e-5 and bilinear position-embedding resize, the
class count) and every test-time setting of the released evaluation
(``segm/eval/miou.py``: the dataset's test resize, the training crop as
sliding window, its stride of the window less 32 pixels, the released
normalisation, and the upsampling of images smaller than the window) is
written to a config that inherits it (``--out-config``, default ``DST``
with ``.py``), and the converted weights are loaded into that model with
``strict=True`` before anything is written. DST is a weights-only
``dict(state_dict=..., meta=...)`` for ``init_model(OUT_CONFIG, DST)`` or
``tools/test.py``.

CBT and gradients: the CBSA paper's eq. 5 stops the gradient through the
pooled initial representatives, as this project's ``CBSA`` does by
default; the released CBT decoder does not. Inference is the same either
way. To fine-tune a converted CBT checkpoint as the released code trains,
set ``attn_cfg=dict(rep_stop_grad=False)`` in the head
(``--released-gradients`` writes it into the config).

The encoder's ImageNet classifier is dropped; any key that cannot be
mapped, a disagreement between weights and ``variant.yml`` or a failed
strict load stops the conversion with the list of keys, and nothing is
written.
"""
import argparse
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat first, registers the heads)
from mmseg_whitebox.cli import run_tool
from mmseg_whitebox.converters.state_dicts import convert_segmenter_file


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help='Segmenter/DEPICT/CBT checkpoint.pth')
    p.add_argument('dst', help='where to write the mmseg checkpoint')
    p.add_argument('--variant', help='variant.yml (default: beside SRC)')
    p.add_argument('config', nargs='?', metavar='CONFIG',
                   help="this project's config to start from (default: "
                   'picked from the decoder, size and classes)')
    p.add_argument('--out-config', help='where to write the config for DST '
                   '(default: DST with .py)')
    p.add_argument('--released-gradients', action='store_true',
                   help='CBT: no stop-gradient on the pooled '
                   'representatives (attn_cfg.rep_stop_grad=False), as '
                   'the released code fine-tunes')
    args = p.parse_args(argv)
    # bad input is a ToolError raised where it is found
    done = convert_segmenter_file(args.src, args.dst, args.variant,
                                  args.config, args.out_config,
                                  args.released_gradients)
    print(f'{done["kind"]} checkpoint -> {done["dst"]} ({done["tensors"]} '
          'tensors, loaded strictly)' +
          (f'; dropped the classifier ({", ".join(done["dropped"])})'
           if done['dropped'] else ''))
    print(f'config: {done["out_config"]} (inherits '
          f'{osp.relpath(done["config"])}' +
          (f'; sets {", ".join(k[6:] for k in done["overrides"])})'
           if done['overrides'] else ')'))
    for note in done['notes']:
        print(f'note: {note}')


if __name__ == '__main__':
    run_tool(main)
