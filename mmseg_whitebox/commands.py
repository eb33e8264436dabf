"""Console scripts (``mmseg-whitebox-train`` ...) and ``python -m
mmseg_whitebox <command>``: each runs a script of ``tools/``.

The scripts are not modules of the package: they stay at their paths in
the checkout and a wheel carries them in ``mmseg_whitebox/.mim/tools``
(see :func:`mmseg_whitebox.apis.tool_path`). A command runs its script as
``python <script>`` would (``runpy``, ``__name__ == '__main__'``,
``sys.argv[0]`` the script), as mmengine's and mim's launchers do, so the
checkout's ``python tools/train.py`` and an installed ``mmseg-whitebox-train``
are the same program.
"""
from __future__ import annotations

import runpy
import sys
from typing import Callable, Dict, List, Optional

from mmseg_whitebox.engine.model_index import tool_path

#: command -> script under tools/ (console script: mmseg-whitebox-<command>)
COMMANDS: Dict[str, str] = {
    'train': 'train.py',
    'test': 'test.py',
    'noise-robustness': 'noise_robustness.py',
    'corruption-robustness': 'analysis_tools/test_corruption_robustness.py',
    'image-demo': 'image_demo.py',
    'export-onnx': 'deployment/export_onnx.py',
    'onnx-inference': 'deployment/onnx_inference.py',
    'segmenter2mmseg': 'model_converters/segmenter2mmseg.py',
    'timm2mmseg': 'model_converters/timm2mmseg.py',
    'whitebox2mmseg': 'model_converters/whitebox2mmseg.py',
    'weights-only': 'model_converters/weights_only.py',
    'synthetic-ade20k': 'dataset_converters/synthetic_ade20k.py',
    'compare-robustness': 'analysis_tools/compare_robustness.py',
    'plot-robustness': 'analysis_tools/plot_robustness.py',
    'get-flops': 'analysis_tools/get_flops.py',
    'coding-rate': 'analysis_tools/coding_rate.py',
}


def run_command(command: str, argv: Optional[List[str]] = None) -> None:
    """Run the script of ``command`` with ``argv`` (default: this process's
    arguments) as its command line; its ``SystemExit`` propagates."""
    script = tool_path(COMMANDS[command])
    args = sys.argv[1:] if argv is None else list(argv)
    saved = sys.argv
    sys.argv = [script] + args
    try:
        runpy.run_path(script, run_name='__main__')
    finally:
        sys.argv = saved


def _console_script(command: str) -> Callable[[], None]:
    def main() -> None:
        run_command(command)

    main.__name__ = command.replace('-', '_')
    main.__doc__ = f'mmseg-whitebox-{command}: tools/{COMMANDS[command]}'
    return main


# the console scripts' entry points (pyproject.toml [project.scripts]):
# mmseg_whitebox.commands:train, ...:noise_robustness, one per command
for _command in COMMANDS:
    globals()[_command.replace('-', '_')] = _console_script(_command)
del _command


def usage() -> str:
    """The command list of ``python -m mmseg_whitebox``."""
    width = max(map(len, COMMANDS))
    lines = [f'  {name:<{width}}  tools/{script}'
             for name, script in COMMANDS.items()]
    return ('usage: python -m mmseg_whitebox COMMAND [ARGS ...]\n'
            '       (or the console script mmseg-whitebox-COMMAND)\n\n'
            'commands (COMMAND --help for their options):\n' +
            '\n'.join(lines))


def main(argv: Optional[List[str]] = None) -> None:
    """``python -m mmseg_whitebox COMMAND [ARGS ...]``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ('-h', '--help'):
        print(usage())
        return
    if args[0] not in COMMANDS:
        print(f'{usage()}\n\nunknown command {args[0]!r}', file=sys.stderr)
        raise SystemExit(2)
    run_command(args[0], args[1:])
