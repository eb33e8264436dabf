"""Every patch of another library (mmengine, mmseg, mmcv, yapf, argparse,
torch, ...) lives in ``mmseg_whitebox/compat/``, and each still fits and
is still needed by the versions it names.

The inventory is a scan of the package's source: outside compat, no
statement may assign to (or delete) an attribute of a name imported from
another package or of a module handed in, a private attribute
(``obj._x``) of anything but ``self``, call ``setattr``/``delattr`` on
anything but ``self``, write ``sys.modules``, or call a mutating method
(``update``, ``append``, ...) on an object imported from another package.
In ``engine/hooks/`` the bar is higher: a hook uses the public hook points
only, so it changes no attribute of anything but itself and reads no
private attribute of another object (nor its base class's private
methods). What the scan finds that is not a library patch is listed in
:data:`ALLOWED`, with why."""
import argparse
import ast
import copy
import importlib.util
import inspect
import os
import os.path as osp
from typing import Dict, Iterator, List, NamedTuple, Set

import pytest
import torch
import torch.nn as nn

from _helpers import REPO
from mmseg_whitebox import compat
from mmseg_whitebox.utils.capabilities import TORCH_RELEASE

PACKAGE_DIR = osp.join(REPO, 'mmseg_whitebox')
#: writes to the process's own state (command line, environment), not to
#: a library
PROCESS_STATE = ('sys.argv', 'os.environ')
#: methods that change the object they are called on
MUTATORS = {'update', 'setdefault', 'pop', 'popitem', 'clear', 'append',
            'extend', 'insert', 'remove', 'add', 'discard', '__setitem__',
            '__delitem__'}
#: the object a method or a hook belongs to
OWN = ('self', 'cls')
#: the libraries compat patches (each module's docstring names its own)
LIBRARIES = ('torch', 'mmengine', 'mmseg', 'mmcv', 'yapf', 'argparse',
             'imagecorruptions')
#: compat modules that patch nothing: the package and the stack's names
NOT_PATCHES = ('__init__.py', 'distributions.py')

_ARGPARSE_ACTION = ('argparse\'s Action protocol: an action stores its '
                    'value on the namespace argparse hands it')
#: (file or folder, statement's first line) -> why it stays outside compat
ALLOWED: Dict[tuple, str] = {
    ('cli/options.py', 'setattr(namespace, self.dest, values)'):
        _ARGPARSE_ACTION,
    ('cli/options.py',
     'setattr(namespace, self.dest, parse_shape(values, self.minimum))'):
        _ARGPARSE_ACTION,
    ('engine/hooks/compile_hook.py', 'setattr(model, name, compiled)'):
        'the run\'s own model gets its methods compiled in place (as '
        'mmengine compiles train_step); no library code changes',
    ('engine/hooks/compile_hook.py', 'runner.cfg.compile = False'):
        'the run\'s config value that mmengine documents as the switch of '
        'its own compilation (cfg.compile)',
    ('engine/hooks/compile_hook.py',
     'labels.data = canonical_strides(labels.data)'):
        'a sample\'s label map (data) given one memory layout',
}


class Finding(NamedTuple):
    path: str  # relative to the package
    line: int
    text: str  # the statement's first line, without its comment
    kind: str

    def __str__(self) -> str:
        return f'mmseg_whitebox/{self.path}:{self.line}: {self.kind}: ' \
            f'{self.text}'


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f'{base}.{node.attr}' if base else ''
    return ''


def _root(node: ast.AST) -> str:
    """The name a chain of attributes, subscripts and calls starts at."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ''


def _own(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in OWN


def _private(name: str) -> bool:
    return name.startswith('_') and not (name.startswith('__') and
                                         name.endswith('__'))


def _imported(tree: ast.AST) -> Dict[str, bool]:
    """Names bound to another package's objects: by an import anywhere in
    the module (name -> whether ``import x`` bound a module), or by an
    assignment or a loop from such names (aliases)."""
    names: Dict[str, bool] = {'__builtins__': True}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split('.')[0] != 'mmseg_whitebox':
                    names[alias.asname or alias.name.split('.')[0]] = True
        elif isinstance(node, ast.ImportFrom) and not node.level and \
                node.module.split('.')[0] not in ('mmseg_whitebox',
                                                  '__future__'):
            for alias in node.names:
                names[alias.asname or alias.name] = False
    for _ in range(2):  # aliases of aliases
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) and \
                    _dotted(node.value).split('.')[0] in names:
                names.setdefault(node.targets[0].id, False)
            elif isinstance(node, ast.For) and \
                    isinstance(node.target, ast.Name) and \
                    isinstance(node.iter, (ast.Tuple, ast.List)) and \
                    node.iter.elts and all(
                        _dotted(e).split('.')[0] in names
                        for e in node.iter.elts):
                names.setdefault(node.target.id, False)
    return names


def _module_parameters(tree: ast.AST) -> Set[str]:
    """Parameters annotated as a module (``types.ModuleType``)."""
    return {arg.arg for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for arg in node.args.args + node.args.kwonlyargs
            if arg.annotation is not None and
            ast.unparse(arg.annotation).endswith('ModuleType')}


def _targets(node: ast.AST) -> Iterator[ast.AST]:
    """What an assignment or ``del`` writes, tuples unpacked."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        todo = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        todo = [node.target]
    else:
        return
    while todo:
        target = todo.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            todo.extend(target.elts)
        elif isinstance(target, ast.Starred):
            todo.append(target.value)
        else:
            yield target


def _process_state(node: ast.AST) -> bool:
    return _dotted(node).startswith(PROCESS_STATE)


def _patches(tree: ast.AST, hooks: bool) -> Iterator[tuple]:
    """``(node, kind)`` of each patch-like statement of a module."""
    imported = _imported(tree)
    modules = _module_parameters(tree)
    for node in ast.walk(tree):
        for target in _targets(node):
            if isinstance(target, ast.Attribute):
                base = target.value
                if _root(target) in imported and not _process_state(target):
                    yield node, 'writes an attribute of another package'
                elif _private(target.attr) and not _own(base):
                    yield node, 'writes a private attribute of another object'
                elif _root(target) in modules:
                    yield node, 'writes an attribute of a module'
                elif hooks and not _own(base):
                    yield node, 'a hook writes an attribute of another object'
            elif isinstance(target, ast.Subscript) and _dotted(
                    target.value) in ('sys.modules', '__builtins__'):
                yield node, f'writes {_dotted(target.value)}'
        if isinstance(node, ast.Call):
            yield from _call_patches(node, imported, hooks)
        if hooks and isinstance(node, ast.Attribute) and \
                _private(node.attr) and not _own(node.value):
            yield node, 'a hook reads a private attribute of another object'


def _call_patches(node: ast.Call, imported: Dict[str, bool],
                  hooks: bool) -> Iterator[tuple]:
    func = _dotted(node.func)
    first = node.args[0] if node.args else None
    if func in ('setattr', 'delattr', 'object.__setattr__',
                'object.__delattr__') and first is not None and \
            not _own(first):
        yield node, f'{func} on another object'
    if isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        receiver = node.func.value
        name = _root(receiver)
        module_function = isinstance(receiver, ast.Name) and \
            imported.get(name, False)
        if name in imported and not module_function and \
                not _process_state(receiver):
            yield node, 'mutates an object of another package'
    if hooks and func in ('getattr', 'hasattr') and len(node.args) > 1 and \
            isinstance(node.args[1], ast.Constant) and \
            _private(str(node.args[1].value)) and not _own(first):
        yield node, 'a hook reads a private attribute of another object'


def findings(folder: str = PACKAGE_DIR) -> List[Finding]:
    """Every patch-like statement of the package's modules under
    ``folder``."""
    found = set()
    for directory, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = osp.join(directory, name)
            relative = osp.relpath(path, PACKAGE_DIR)
            with open(path, encoding='utf-8') as f:
                source = f.read()
            lines = source.splitlines()
            hooks = relative.startswith(osp.join('engine', 'hooks'))
            for node, kind in _patches(ast.parse(source), hooks):
                text = lines[node.lineno - 1].split('  #')[0].strip()
                found.add(Finding(relative, node.lineno, text, kind))
    return sorted(found)


def _allowed(finding: Finding, key: tuple) -> bool:
    where, text = key
    return finding.path.startswith(where) and finding.text == text


def _outside_compat() -> List[Finding]:
    return [f for f in findings() if not f.path.startswith('compat' + os.sep)]


def test_every_patch_of_another_library_is_in_compat():
    unexplained = [f for f in _outside_compat()
                   if not any(_allowed(f, key) for key in ALLOWED)]
    assert not unexplained, (
        'patches of another library outside mmseg_whitebox/compat/ (move '
        'each into a compat module that names what it patches, why and '
        'the versions it targets; a hook uses public hook points only):\n'
        + '\n'.join(map(str, unexplained)))


def test_every_allowance_is_still_there():
    found = _outside_compat()
    stale = [key for key in ALLOWED
             if not any(_allowed(f, key) for f in found)]
    assert not stale, f'ALLOWED names what the scan no longer finds: {stale}'


def test_the_scan_finds_each_compat_module_s_patches():
    """The scan sees every kind of patch compat keeps: each compat module
    (but the package and the stack's names) holds at least one."""
    folder = osp.join(PACKAGE_DIR, 'compat')
    patched = {osp.basename(f.path) for f in findings(folder)}
    modules = {name for name in os.listdir(folder) if name.endswith('.py')}
    assert modules - set(NOT_PATCHES) == patched


def test_each_compat_module_names_the_library_and_versions():
    folder = osp.join(PACKAGE_DIR, 'compat')
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.py') or name in NOT_PATCHES:
            continue
        with open(osp.join(folder, name), encoding='utf-8') as f:
            doc = ast.get_docstring(ast.parse(f.read())) or ''
        assert any(c.isdigit() for c in doc), f'{name}: no version named'
        assert any(library in doc for library in LIBRARIES), \
            f'{name}: names no library it patches'


def test_a_hook_overrides_no_private_method_of_its_base():
    from mmseg_whitebox.engine import hooks
    for name in hooks.__all__:
        hook = getattr(hooks, name)
        if not isinstance(hook, type):
            continue
        for attr in vars(hook):
            for base in hook.__mro__[1:]:
                assert not (_private(attr) and attr in vars(base)), \
                    f'{name}.{attr} overrides {base.__name__}.{attr}'


# -- each patch: the versions it targets still need it and it still fits ---

def test_last_checkpoint_is_named_with_the_hook_module_s_open(tmp_path):
    """Needs: mmengine's ``CheckpointHook`` writes ``last_checkpoint`` with
    ``open(path, 'w')``, the name its module finds as the builtin. Fits:
    the module has no ``open`` of its own; inside the block the old text
    stays until the new one is complete; after it the name is gone."""
    from mmengine.hooks import checkpoint_hook as module
    source = inspect.getsource(
        module.CheckpointHook._save_checkpoint_with_step)
    assert "'last_checkpoint'" in source and "open(save_file, 'w')" in source
    assert 'open' not in vars(module)
    path = tmp_path / compat.LAST_CHECKPOINT
    path.write_text('iter_1.pth')
    with compat.last_checkpoint_written_atomically():
        with compat.last_checkpoint_written_atomically():  # nested: one
            with module.open(str(path), 'w') as f:
                f.write('iter_2.pth')
                assert path.read_text() == 'iter_1.pth'
        assert 'open' in vars(module)
    assert path.read_text() == 'iter_2.pth'
    assert 'open' not in vars(module)


def test_persistent_dataloader_workers_stop_only_privately():
    """Needs: a ``DataLoader`` has no public method that stops its workers.
    Fits: a persistent loader keeps its iterator in ``_iterator``; the fix
    stops its workers, and the loader starts new ones when used again."""
    from torch.utils.data import DataLoader
    public = [name for name, _ in inspect.getmembers(DataLoader, callable)
              if not name.startswith('_')]
    assert not [name for name in public
                if any(w in name for w in ('shutdown', 'close', 'stop',
                                           'terminate', 'release'))], public
    loader = DataLoader(list(range(4)), batch_size=2, num_workers=1,
                        persistent_workers=True)
    batches = [b.tolist() for b in loader]
    workers = list(loader._iterator._workers)
    assert compat.stop_persistent_workers(loader) is True
    assert loader._iterator is None
    assert not any(worker.is_alive() for worker in workers)
    assert [b.tolist() for b in loader] == batches == [[0, 1], [2, 3]]
    assert compat.stop_persistent_workers(loader) is True
    assert compat.stop_persistent_workers(DataLoader([1])) is False


def test_argparse_usage_errors_leave_only_through_error():
    """Needs: argparse reports a usage error only by calling the parser's
    ``error``, ``exit_on_error=False`` included (a missing required
    argument). Fits: ``error`` is the class's method, given back after
    the block."""
    original = argparse.ArgumentParser.error
    parser = argparse.ArgumentParser(prog='tool', exit_on_error=False)
    parser.add_argument('--x', required=True)
    lines: List[str] = []
    with compat.parser_errors_reported_to(lines.append):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([])
    assert exit_.value.code == 2
    assert lines == ['tool: error: the following arguments are required: '
                     '--x']
    assert argparse.ArgumentParser.error is original


def test_a_usage_error_is_recorded_for_the_launch_scripts(tmp_path,
                                                         monkeypatch):
    """The fix in use: where the launch scripts name an error file, a
    tool's argparse error is appended to it."""
    from mmseg_whitebox.cli.errors import (ERROR_FILE_ENV,
                                           recorded_parser_errors)
    path = tmp_path / 'errors'
    monkeypatch.setenv(ERROR_FILE_ENV, str(path))
    parser = argparse.ArgumentParser(prog='tool')
    parser.add_argument('--n', type=int)
    with recorded_parser_errors(), pytest.raises(SystemExit):
        parser.parse_args(['--n', 'x'])
    assert path.read_text() == \
        "tool: error: argument --n: invalid int value: 'x'\n"


def test_mmengine_s_model_lookup_reads_the_scope_package_only():
    """Needs: mmengine's lookup of mmseg's folder, unpatched, yields none
    of this project's own model names. Fits: the lookup is the static
    method the fix wrapped (on import), and a second call changes
    nothing."""
    from mmengine.infer.infer import BaseInferencer

    from mmseg_whitebox.engine.model_index import project_models
    lookup = BaseInferencer.__dict__['_get_models_from_metafile']
    assert isinstance(lookup, staticmethod)
    assert getattr(lookup.__func__, '_mmseg_whitebox', False)
    original = inspect.getclosurevars(lookup.__func__).nonlocals['original']
    mmseg_dir = BaseInferencer._get_repo_or_mim_dir('mmseg')
    ours = {model['Name'] for model in project_models()}
    unpatched = {model['Name'] for model in original(mmseg_dir)}
    patched = {model['Name'] for model in lookup.__func__(mmseg_dir)}
    assert ours - unpatched and ours <= patched
    assert compat.add_scope_models(project_models) is False


def test_inductor_lacks_the_loss_decompositions_on_torch_2_1():
    """Needs: torch 2.1's core decomposition table (inductor's start)
    lacks the loss's ``nll_loss2d`` ops; newer torch has them and the fix
    adds nothing. Fits: afterwards inductor's table has them."""
    from torch._decomp import core_aten_decompositions
    from torch._inductor.decomposition import decompositions
    ops = [getattr(torch.ops.aten, name).default
           for name in compat.DECOMPOSED_OPS]
    core = core_aten_decompositions()
    lacking = [op for op in ops if op not in core]
    if TORCH_RELEASE == (2, 1):
        assert lacking == ops
    added = compat.decompose_as_newer_torch()
    if not lacking:
        assert added == []
    assert all(op in decompositions for op in ops)


def test_mmengine_decides_its_device_once():
    """Needs: mmengine's ``get_device`` answers the ``DEVICE`` it decided
    on import, not what torch sees now. Fits: the names the fix replaces
    are there (the fix in use: tests/test_distributed.py,
    ``test_cpu_run_hides_the_gpus_and_restores_them``)."""
    import mmengine.device.utils as engine
    from mmengine.device import get_device
    assert inspect.getsource(get_device).rstrip().endswith('return DEVICE')
    assert get_device() == engine.DEVICE
    assert callable(torch.cuda.is_available)
    assert callable(torch.cuda.device_count)


def test_a_module_copy_shares_its_children():
    """Needs: ``copy.copy`` of a module shares its ``_modules`` (a child
    set on the copy is set on the original). Fits: the view gets its own,
    the original keeps its child."""
    model = nn.Module()
    model.head = nn.Linear(1, 1)
    assert copy.copy(model)._modules is model._modules
    view = compat.module_view(model, head=nn.Identity())
    assert isinstance(view.head, nn.Identity)
    assert isinstance(model.head, nn.Linear)


def test_imagecorruptions_still_calls_what_newer_libraries_removed():
    """Needs: imagecorruptions 1.1.2 calls ``gaussian(multichannel=True)``
    (gone from this scikit-image), ``np.float_`` and ``pkg_resources``.
    Fits: the adapted library imports and corrupts."""
    spec = importlib.util.find_spec('imagecorruptions')
    if spec is None:
        pytest.skip('imagecorruptions is not installed (corruptions extra)')
    import skimage.filters
    # read, not imported: its import needs the fix
    with open(osp.join(osp.dirname(spec.origin), 'corruptions.py'),
              encoding='utf-8') as f:
        source = f.read()
    for call in ('multichannel=True', 'np.float_',
                 'from pkg_resources import resource_filename'):
        assert call in source, call
    assert 'multichannel' not in inspect.signature(
        skimage.filters.gaussian).parameters
    import numpy as np
    library = compat.import_imagecorruptions()
    image = np.zeros((32, 32, 3), np.uint8)
    assert library.corrupt(image, corruption_name='gaussian_blur',
                           severity=1).shape == image.shape


def test_mmseg_branches_on_the_input_size_the_export_fixes():
    """Needs: mmseg's ViT resizes its position embedding only when the
    token count differs from the training grid, and ``AdaptivePadding``
    pads only when some padding is needed (Python branches that
    ``torch.export`` would freeze). Fits: inside the block the ViT computes
    what mmseg's own code does at the training grid and at other sizes
    (padded ones too); after it the instance methods are gone."""
    from mmseg.models.backbones import VisionTransformer
    from mmseg.models.utils.embed import AdaptivePadding
    assert 'if x_len != pos_len:' in inspect.getsource(
        VisionTransformer._pos_embeding)
    assert 'if pad_h > 0 or pad_w > 0:' in inspect.getsource(
        AdaptivePadding.forward)
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dims=16,
                            num_layers=1, num_heads=2, out_indices=(0, ),
                            patch_pad='corner')
    vit.eval()
    padding = next(m for m in vit.modules()
                   if isinstance(m, AdaptivePadding))
    for shape in ((32, 32), (36, 44)):
        x = torch.randn(1, 3, *shape)
        with torch.no_grad():
            expected = vit(x)[0]
            with compat.export_friendly(vit):
                assert 'forward' in vars(padding)
                got = vit(x)[0]
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert '_pos_embeding' not in vars(vit) and 'forward' not in vars(padding)


def test_mmengine_s_runner_keeps_resume_private():
    """Needs: mmengine's ``Runner`` keeps ``resume`` only as ``_resume``
    (no public name). Fits: :func:`compat.runner_resumes` reads it."""
    from mmengine.runner import Runner
    source = inspect.getsource(Runner.__init__)
    assert 'self._resume = resume' in source
    runner = Runner.__new__(Runner)
    assert compat.runner_resumes(runner) is False
    runner._resume = True
    assert compat.runner_resumes(runner) is True
