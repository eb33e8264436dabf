"""Convert a trusted checkpoint into one that loads weights-only.

    python tools/model_converters/weights_only.py IN.pth OUT.pth --trust

Checkpoints written by a plain mmengine run pickle Python objects, so this
project refuses to load them: unpickling can run code the file contains.
OUT.pth holds the same weights and training state as plain data, for
tools/test.py, --resume, load_from and mmseg.apis. From any directory:
``python -m mmseg_whitebox weights-only ...`` or
``mmseg-whitebox-weights-only ...``.
"""
import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import ToolError, run_tool, tool_parser
from mmseg_whitebox.converters.weights_only import convert


def main(argv=None) -> None:
    p = tool_parser(__doc__)
    p.add_argument('src', help='checkpoint to convert')
    p.add_argument('dst', help='where to write the weights-only checkpoint')
    p.add_argument('--trust', action='store_true',
                   help='confirm that SRC comes from a source you trust: it '
                   'is unpickled in full, which can run code it contains')
    args = p.parse_args(argv)
    if not args.trust:
        raise ToolError(
            'loading SRC in full can run arbitrary code it contains; '
            'pass --trust if you trust where it came from')
    convert(args.src, args.dst)
    print(f'wrote {args.dst} (loads with weights_only=True)')


if __name__ == '__main__':
    run_tool(main)
