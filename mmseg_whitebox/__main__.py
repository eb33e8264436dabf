"""``python -m mmseg_whitebox COMMAND [ARGS ...]``: the tools of ``tools/``
by name (see :mod:`mmseg_whitebox.commands`)."""
from mmseg_whitebox.commands import main

main()
