"""Startup hook (opt-in): the compatibility layer whatever is imported
first.

``import mmseg_whitebox`` applies :mod:`mmseg_whitebox.compat` itself, and
the configs import it (``custom_imports``), so this project's tools and
mmseg's own ``tools/train.py`` and ``tools/test.py`` need no hook. A script
that imports torchvision, timm, ``mmseg.models`` or ``mmseg.apis`` *before*
``mmseg_whitebox`` fails in the CPU install (``import torchvision``: the
CUDA-built torchvision's missing ``torchvision::nms``; ``mmseg.models`` on
mmcv-lite: no ``mmcv._ext``). Either import ``mmseg_whitebox`` first, or
opt into this hook, a file ``mmseg_whitebox_startup.pth`` in the
environment's site-packages::

    python -m mmseg_whitebox.startup --install     # --uninstall, --status

At interpreter start the ``.pth`` loads this file (standard library only:
nothing of torch, mmcv or mmseg is imported then) as the module
``_mmseg_whitebox_startup``, whose finder goes first on ``sys.meta_path``
and does nothing until one of these is first imported:

=============================  ========================================
import                         fix of :mod:`mmseg_whitebox.compat`
=============================  ========================================
``torchvision``                ``torchvision_shim``, before it loads
``mmcv.ops``                   ``mmcv_ops_shim``: the stand-in instead
                               of the failing import, where needed
``mmengine.runner.checkpoint`` ``weights_only_loader`` and
                               ``no_unsafe_load_fallback``, once it
                               loaded
``mmengine.runner.loops``      ``resume_replays_skipped_batches``, once
                               it loaded
=============================  ========================================

Each fix is applied by the same ``mmseg_whitebox.compat`` module that
``import mmseg_whitebox`` uses (loaded from its file without the package,
so nothing else is imported), and only where this environment needs it, so
:func:`~mmseg_whitebox.compat.apply` finds it in place. A fix that fails is
reported as a warning and the import goes on as without the hook.
``MMSEG_WHITEBOX_STARTUP_HOOK=0`` switches the hook off for one run.
"""
from __future__ import annotations

import os
import sys
import types

#: the name the ``.pth`` file loads this file under
HOOK_MODULE = '_mmseg_whitebox_startup'
#: the file in site-packages
PTH_NAME = 'mmseg_whitebox_startup.pth'
#: set to 0 to switch the hook off for one run
DISABLE_ENV = 'MMSEG_WHITEBOX_STARTUP_HOOK'
#: first import of ``name`` -> (fixes in mmseg_whitebox.compat, when)
TRIGGERS = {
    'torchvision': (('torchvision_shim', ), 'before'),
    'mmcv.ops': (('mmcv_ops_shim', ), 'instead'),
    'mmengine.runner.checkpoint': (('weights_only_loader',
                                    'no_unsafe_load_fallback'), 'after'),
    'mmengine.runner.loops': (('resume_replays_skipped_batches', ), 'after'),
}
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _warn(message: str) -> None:
    import warnings
    warnings.warn(f'mmseg_whitebox startup hook: {message}', RuntimeWarning,
                  stacklevel=2)


def load_compat() -> types.ModuleType | None:
    """``mmseg_whitebox.compat``: the imported module if there is one, else
    loaded from its file without running the package's ``__init__``
    (which would import mmseg and every model). None if this checkout is
    not the ``mmseg_whitebox`` Python would import (e.g. uninstalled)."""
    module = sys.modules.get('mmseg_whitebox.compat')
    if module is not None:
        return module
    import importlib
    import importlib.util
    if 'mmseg_whitebox' in sys.modules:
        return importlib.import_module('mmseg_whitebox.compat')
    spec = importlib.util.find_spec('mmseg_whitebox')
    locations = list(getattr(spec, 'submodule_search_locations', None) or [])
    if not any(os.path.samefile(loc, PACKAGE_DIR) for loc in locations
               if os.path.isdir(loc)):
        return None
    spec = importlib.util.spec_from_file_location(
        'mmseg_whitebox.compat', os.path.join(PACKAGE_DIR, 'compat.py'))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


class _FixAfterExec:
    """Loader wrapper: run the real loader, then the fix; otherwise it is
    the real loader (``get_source`` etc. pass through)."""

    def __init__(self, loader, fix):
        self._loader = loader
        self._fix = fix

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # the module looks as if loaded without the hook
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        try:
            self._fix()
        except Exception as exc:  # the module itself loaded fine
            _warn(f'no fix after importing {module.__name__}: '
                  f'{type(exc).__name__}: {exc}')

    def __getattr__(self, name):
        if name.startswith('__') or name == '_loader':
            raise AttributeError(name)
        return getattr(self._loader, name)


class CompatFinder:
    """Meta path finder that applies a compat fix on the first import of a
    name in :data:`TRIGGERS`; it never finds a module itself, except the
    ``mmcv.ops`` stand-in."""

    def __init__(self):
        self._busy = set()
        #: fixes applied, ``name: in effect?``
        self.applied = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in TRIGGERS or fullname in self._busy:
            return None
        self._busy.add(fullname)  # imports made by the fix pass through
        try:
            fixes, when = TRIGGERS[fullname]
            if when == 'before':
                self._apply(fixes)
            elif when == 'instead':
                return self._mmcv_ops(fullname, fixes)
            else:
                return self._after(fullname, path, target, fixes)
        except Exception as exc:  # never break the import itself
            fixes = ', '.join(TRIGGERS[fullname][0])
            _warn(f'{fixes} not applied on importing {fullname}: '
                  f'{type(exc).__name__}: {exc}')
        finally:
            self._busy.discard(fullname)
        return None

    def _apply(self, fixes):
        compat = load_compat()
        if compat is not None:
            for fix in fixes:
                self.applied[fix] = compat.apply_fix(fix)

    def _mmcv_ops(self, fullname, fixes):
        self._apply(fixes)
        module = sys.modules.get(fullname)
        if getattr(module, '__mmseg_whitebox_shim__', False):
            return module.__spec__  # its loader hands over the stand-in
        return None  # not needed here: the real mmcv.ops

    def _after(self, fullname, path, target, fixes):
        for finder in sys.meta_path:
            find_spec = getattr(finder, 'find_spec', None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, 'exec_module'):
            return spec
        spec.loader = _FixAfterExec(spec.loader, lambda: self._apply(fixes))
        return spec


def install() -> CompatFinder | None:
    """Put a :class:`CompatFinder` first on ``sys.meta_path`` (once); what
    the ``.pth`` file calls at interpreter start."""
    if os.environ.get(DISABLE_ENV, '1') == '0':
        return None
    for finder in sys.meta_path:
        if type(finder).__name__ == 'CompatFinder' and \
                type(finder).__module__ in (HOOK_MODULE, __name__):
            return finder
    finder = CompatFinder()
    sys.meta_path.insert(0, finder)
    return finder


# --- installing the .pth file (python -m mmseg_whitebox.startup) ----------

def site_packages() -> str:
    """This interpreter's site-packages (the venv's, in a venv)."""
    import sysconfig
    return sysconfig.get_paths()['purelib']


def pth_text() -> str:
    """The ``.pth`` file: one line that loads this file and installs the
    finder, and does nothing if the file is gone."""
    here = os.path.join(PACKAGE_DIR, 'startup.py')
    code = ('try:\n'
            '    import importlib.util as u, os\n'
            f'    p = {here!r}\n'
            f'    if os.path.isfile(p) and {HOOK_MODULE!r} not in sys.modules'
            f' and os.environ.get({DISABLE_ENV!r}, "1") != "0":\n'
            f'        s = u.spec_from_file_location({HOOK_MODULE!r}, p)\n'
            '        m = u.module_from_spec(s)\n'
            '        sys.modules[s.name] = m\n'
            '        s.loader.exec_module(m)\n'
            '        m.install()\n'
            'except Exception as e:\n'
            '    print("mmseg_whitebox startup hook not installed: %r" % e,'
            ' file=sys.stderr)\n')
    return (
        '# mmseg_whitebox startup hook (opt-in): applies mmseg_whitebox.'
        'compat\'s fixes when\n# torchvision, mmcv.ops or mmengine is first '
        'imported, so import order does not matter.\n'
        '# See: python -m mmseg_whitebox.startup --status; remove: '
        '--uninstall (or delete this file).\n'
        f'import sys; exec({code!r})\n')


def hook_target(path: str) -> str | None:
    """The ``startup.py`` that the ``.pth`` file ``path`` loads (None if it
    is not one :func:`pth_text` wrote)."""
    import ast
    with open(path, encoding='utf-8') as f:
        lines = [ln for ln in f if ln.startswith('import ')]
    try:
        call = ast.parse(lines[-1]).body[-1].value
        code = call.args[0].value
        line = next(ln for ln in code.splitlines()
                    if ln.strip().startswith('p = '))
        return ast.literal_eval(line.split('=', 1)[1].strip())
    except (IndexError, AttributeError, StopIteration, SyntaxError,
            ValueError):
        return None


def status(site_dir: str | None = None) -> str:
    """What ``--status`` prints: whether the hook is installed in
    ``site_dir`` and for which checkout, whether it is active here, what it
    does, and which fixes this environment needs."""
    path = os.path.join(site_dir or site_packages(), PTH_NAME)
    here = os.path.join(PACKAGE_DIR, 'startup.py')
    lines = [f'startup hook (opt-in): {path}']
    if not os.path.exists(path):
        lines.append('  not installed (opt in: python -m '
                     'mmseg_whitebox.startup --install)')
    else:
        target = hook_target(path)
        if target is not None and os.path.isfile(target) and \
                os.path.samefile(target, here):
            lines.append(f'  installed for this checkout ({target})')
        else:
            lines.append(f'  installed for another checkout ({target}): '
                         'it applies nothing until this checkout\'s '
                         'mmseg_whitebox is imported (reinstall with '
                         '--install)')
    if os.environ.get(DISABLE_ENV, '1') == '0':
        lines.append(f'  switched off for this run ({DISABLE_ENV}=0)')
    finder = next((f for f in sys.meta_path
                   if type(f).__name__ == 'CompatFinder'), None)
    lines.append('  active in this interpreter: ' + (
        f'yes, applied {finder.applied}' if finder is not None else 'no'))
    lines.append('What it does: at every start of this environment\'s '
                 'Python it loads startup.py (standard library only) and '
                 'puts an import hook first on sys.meta_path, which applies '
                 'a fix of mmseg_whitebox.compat, where needed, on the first '
                 'import of')
    when_text = {'before': 'before it loads',
                 'instead': 'instead of the failing import',
                 'after': 'once it loaded'}
    for name, (fixes, when) in TRIGGERS.items():
        lines.append(f'  {name:28} {", ".join(fixes)} ({when_text[when]})')
    lines.append('so that scripts may import torchvision, timm, mmseg.models '
                 'or mmseg.apis before mmseg_whitebox. Without it, import '
                 'mmseg_whitebox first: it applies the same fixes (the '
                 'configs do, through custom_imports).')
    compat = sys.modules.get('mmseg_whitebox.compat')
    if compat is not None and compat.STATUS:
        needed = ', '.join(
            f'{fix}: {"yes" if compat.STATUS.get(fix) else "no"}'
            for fix in compat.FIXES)
        lines.append(f'Fixes this environment needs: {needed}')
    return '\n'.join(lines)


def install_hook(site_dir: str | None = None) -> str:
    """Write the ``.pth`` file into ``site_dir`` (default: this
    interpreter's site-packages); returns its path."""
    path = os.path.join(site_dir or site_packages(), PTH_NAME)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(pth_text())
    return path


def uninstall_hook(site_dir: str | None = None) -> str | None:
    """Remove the ``.pth`` file; returns its path, or None if absent."""
    path = os.path.join(site_dir or site_packages(), PTH_NAME)
    if not os.path.exists(path):
        return None
    os.remove(path)
    return path


def main(argv: list | None = None) -> int:
    """``python -m mmseg_whitebox.startup``: opt in or out, or say what
    the hook does and whether it is installed."""
    import argparse
    parser = argparse.ArgumentParser(
        prog='python -m mmseg_whitebox.startup',
        description='Opt into (or out of) the startup hook that applies '
        'mmseg_whitebox.compat when torchvision, mmcv.ops or mmengine is '
        'first imported, so that scripts may import them before '
        'mmseg_whitebox. Without an option: --status.')
    action = parser.add_mutually_exclusive_group()
    action.add_argument('--install', action='store_true',
                        help=f'write {PTH_NAME} into site-packages')
    action.add_argument('--uninstall', action='store_true',
                        help=f'remove {PTH_NAME} from site-packages')
    action.add_argument('--status', action='store_true',
                        help='installed? for which checkout? active? what '
                        'it does (the default)')
    parser.add_argument('--site-dir', help='another folder than this '
                        "interpreter's site-packages")
    args = parser.parse_args(argv)
    site_dir = args.site_dir or site_packages()
    path = os.path.join(site_dir, PTH_NAME)
    if args.install:
        print(f'installed {install_hook(site_dir)}')
    elif args.uninstall:
        removed = uninstall_hook(site_dir)
        print(f'removed {removed}' if removed else f'not installed: {path}')
    else:
        print(status(site_dir))
    return 0


if __name__ == '__main__':
    sys.exit(main())
