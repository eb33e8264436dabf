"""Convert a trusted checkpoint into one that loads weights-only.

A thin wrapper: the converter is :mod:`mmseg_whitebox.utils.weights_only`,
which also runs from any directory as

    python -m mmseg_whitebox.utils.weights_only IN.pth OUT.pth --trust

(or ``mmseg-whitebox-weights-only IN.pth OUT.pth --trust``).
"""
from mmseg_whitebox.utils.cli import run_tool
from mmseg_whitebox.utils.weights_only import main

if __name__ == '__main__':
    run_tool(main)
