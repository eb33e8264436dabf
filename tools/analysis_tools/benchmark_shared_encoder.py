"""Time a shared-encoder noise sweep against one evaluation per setting.

    python tools/analysis_tools/benchmark_shared_encoder.py \
        [--config configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py] \
        [--images 2] [--image-size 512 683] [--settings 20] \
        [--max-heads 20] [--target decoder-attention] [--threads N] \
        [--device cpu|cuda] [--cfg-options k=v ...]

Builds the config's model with random weights (no pretrained encoder, no
checkpoint), writes --images synthetic ADE20K-layout validation images of
exactly --image-size (mmseg_whitebox.datasets.synthetic_ade20k) and
evaluates --settings noise settings (the CBSA paper's sigmas, one draw
each) on them with the config's own test pipeline, inference mode (slide
for the ADE20K configs) and IoUMetric: once one setting at a time
(ParameterNoise + the test loop, encoder included, as tools/
noise_robustness.py --no-shared-encoder) and once with the shared encoder
(--max-heads head copies per pass). Prints both times, their ratio
(shared / sequential; the issue's target is <= 0.15 for 20 settings on
the ViT-S config) and whether every setting's metrics are identical.
A measurement to print, not a test: the ratio depends on the machine.
"""
import argparse
import os.path as osp
import sys
import tempfile
import time

import torch

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.utils.cli import (ToolError, run_tool, tool_parser)

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEFAULT_CONFIG = osp.join('configs', 'cbsa',
                          'cbsa_vit-s_8xb1-160k_ade20k-512x512.py')


def parse_args(argv=None) -> argparse.Namespace:
    from mmseg_whitebox.utils.input_checks import CfgOptionsAction
    p = tool_parser(__doc__)
    p.add_argument('--config', default=DEFAULT_CONFIG)
    p.add_argument('--images', type=int, default=2,
                   help='synthetic validation images (default 2)')
    p.add_argument('--image-size', type=int, nargs=2, default=(512, 683),
                   metavar=('H', 'W'))
    p.add_argument('--settings', type=int, default=20,
                   help='noise settings, one draw per sigma of the paper\'s '
                   'grid, repeated if more (default 20)')
    p.add_argument('--max-heads', type=int, default=None,
                   help='head copies per pass (default: all settings)')
    p.add_argument('--target', default='decoder-attention')
    p.add_argument('--threads', type=int,
                   help='torch intra-op threads (default: torch\'s)')
    p.add_argument('--device', default='cpu',
                   help='where the model runs (default cpu)')
    p.add_argument('--data-dir',
                   help='where the synthetic images go (default: a '
                   'temporary folder)')
    p.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    args = p.parse_args(argv)
    if args.images < 1 or args.settings < 1:
        p.error('--images and --settings must be >= 1')
    if args.max_heads is not None and args.max_heads < 1:
        p.error('--max-heads must be >= 1')
    return args


def build(args, data_root: str, device: torch.device):
    """Model (random weights), test dataloader and evaluator."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner
    from mmseg.registry import MODELS
    cfg = Config.fromfile(osp.join(REPO, args.config)
                          if not osp.isabs(args.config) else args.config)
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    cfg.test_dataloader.dataset.data_root = data_root
    cfg.test_dataloader.num_workers = 0
    cfg.test_dataloader.persistent_workers = False
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.to(device)
    loader = Runner.build_dataloader(cfg.test_dataloader)
    return cfg, model.eval(), loader


def timed_evaluation(model, evaluate, device: torch.device):
    """Seconds of one evaluation, and of the encoder within it."""
    from mmseg_whitebox.analysis.benchmark import synchronize
    spent = [0.0]
    extract_feat = model.extract_feat

    def timed(inputs):
        synchronize(device)
        start = time.perf_counter()
        feats = extract_feat(inputs)
        synchronize(device)
        spent[0] += time.perf_counter() - start
        return feats

    model.extract_feat = timed
    try:
        start = time.perf_counter()
        evaluate()
        return time.perf_counter() - start, spent[0]
    finally:
        del model.extract_feat


def main(argv=None) -> float:
    args = parse_args(argv)
    from mmseg_whitebox.datasets.synthetic_ade20k import \
        generate_synthetic_ade20k
    from mmseg_whitebox.robustness import (PAPER_SIGMAS, LoopEvaluation,
                                           ParameterNoise, select_parameters)
    from mmseg_whitebox.robustness.metrics import (NonFiniteCounter,
                                                   quiet_logging)
    from mmseg_whitebox.robustness.shared_encoder import (
        NoiseSetting, SharedEncoderEvaluation)
    from mmseg_whitebox.analysis.benchmark import prepare_run
    try:
        device, _ = prepare_run(args.device, args.threads, None)
    except (ValueError, RuntimeError) as exc:
        raise ToolError(f'--device {args.device}: {exc}') from exc
    with tempfile.TemporaryDirectory() as tmp:
        data_root = generate_synthetic_ade20k(
            args.data_dir or tmp, num_train=1, num_val=args.images,
            image_size=tuple(args.image_size), size_jitter=0.0, seed=0)
        cfg, model, loader = build(args, data_root, device)
        try:
            sel = select_parameters(model, args.target)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        evaluate = LoopEvaluation(model, loader, cfg.test_evaluator)
        shared = SharedEncoderEvaluation(
            model, loader, evaluate.evaluator,
            args.max_heads or args.settings)
        reason = shared.unsupported(sel.parameters)
        if reason:
            raise ToolError(f'no shared-encoder sweep for --target '
                            f'{args.target}: {reason}')
        sigmas = [PAPER_SIGMAS[i % len(PAPER_SIGMAS)]
                  for i in range(args.settings)]
        settings = [NoiseSetting(sel.parameters, s, 'absolute', 0)
                    for s in sigmas]
        test_cfg = dict(model.test_cfg)
        print(f'{args.config}: random weights, {args.images} synthetic '
              f'{args.image_size[0]}x{args.image_size[1]} images, inference '
              f'{test_cfg}, {args.settings} settings of {sel.label} noise, '
              f'{device}, {torch.get_num_threads()} CPU threads')
        with quiet_logging():
            # warm-up (file cache, allocator), not timed as a setting; it
            # measures the encoder's share of one evaluation
            t_clean, t_encoder = timed_evaluation(model, evaluate, device)
            start = time.perf_counter()
            sequential = []
            for s in settings:
                with ParameterNoise(s.parameters, s.sigma, s.mode, s.seed), \
                        NonFiniteCounter(model):  # as NoiseSweep evaluates
                    sequential.append(evaluate())
            t_seq = time.perf_counter() - start
            start = time.perf_counter()
            together = []
            for i in range(0, len(settings), shared.max_heads):
                together += shared(settings[i:i + shared.max_heads])
            t_shared = time.perf_counter() - start
    same = all(all(b[k] == v for k, v in a.items())
               for a, b in zip(sequential, together))
    ratio = t_shared / t_seq
    passes = -(-args.settings // shared.max_heads)
    print(f'sequential: {t_seq:.1f} s ({args.settings} evaluations)')
    print(f'shared encoder: {t_shared:.1f} s ({passes} pass(es), up to '
          f'{shared.max_heads} head copies each)')
    print(f'ratio shared / sequential: {ratio:.3f}')
    share = t_encoder / t_clean
    expected = (passes * share + args.settings * (1 - share)) / args.settings
    print(f'encoder (extract_feat): {t_encoder:.1f} s of {t_clean:.1f} s '
          f'in one evaluation ({share:.0%}); the rest (head, upsampling '
          'and merging of the logits, argmax, metric; data loading, which '
          'a shared pass does once) runs once per setting: expected ratio '
          f'<= {expected:.3f}')
    print(f'identical metrics in every setting: {"yes" if same else "NO"}')
    if not same:
        for sigma, a, b in zip(sigmas, sequential, together):
            print(f'  sigma {sigma:g}: {a} vs {b}', file=sys.stderr)
        raise ToolError('the shared-encoder results differ')
    return ratio


if __name__ == '__main__':
    run_tool(main)
