"""One capability table: every torch/mmengine version or feature probe of
the package is in ``mmseg_whitebox/utils/capabilities.py`` (compat's
modules probe what their own patches target), and each capability answers
for the feature or release it is named for."""
import ast
import os
import os.path as osp
from typing import Dict, Iterator, List

import torch

from _helpers import REPO
from mmseg_whitebox.utils import capabilities
from mmseg_whitebox.utils.capabilities import TORCH_RELEASE, release

PACKAGE_DIR = osp.join(REPO, 'mmseg_whitebox')
#: the one module that probes, and compat, whose probes decide its patches
PROBES_ALLOWED = (osp.join('utils', 'capabilities.py'), 'compat' + os.sep)
#: packages whose features the table answers for
PROBED = ('torch', 'mmengine', 'mmcv', 'mmseg', 'torchvision', 'timm')
#: calls that parse or compare a version
VERSION_CALLS = ('digit_version', 'parse_version', 'version.parse',
                 'Version', 'LooseVersion', 'StrictVersion')


def _probed_names(tree: ast.AST) -> Dict[str, str]:
    """Names bound to a module or object of a :data:`PROBED` package."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split('.')[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return {name: module for name, module in names.items()
            if module.split('.')[0] in PROBED}


def _root(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ''


def _probes(tree: ast.AST) -> Iterator[ast.AST]:
    """Feature and version probes of a :data:`PROBED` package: ``hasattr``
    or ``getattr`` with a default on one of its objects,
    ``inspect.signature`` of one, a version parsed or compared (its
    ``__version__`` anywhere but in a message or a report's field)."""
    probed = _probed_names(tree)
    parents = {child: node for node in ast.walk(tree)
               for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            args = node.args
            if (func == 'hasattr' or func == 'getattr' and len(args) > 2) \
                    and _root(args[0]) in probed:
                yield node
            elif func.endswith('signature') and args and \
                    _root(args[0]) in probed:
                yield node
            elif func.split('.')[-1] in VERSION_CALLS or \
                    func in VERSION_CALLS:
                yield node
        elif isinstance(node, ast.Attribute) and \
                node.attr == '__version__' and _root(node) in probed and \
                not isinstance(parents.get(node), (ast.FormattedValue,
                                                   ast.keyword, ast.Dict)):
            yield node


def probes_outside_the_table() -> List[str]:
    found = []
    for folder, _, files in os.walk(PACKAGE_DIR):
        for name in sorted(files):
            path = osp.join(folder, name)
            relative = osp.relpath(path, PACKAGE_DIR)
            if not name.endswith('.py') or \
                    relative.startswith(PROBES_ALLOWED):
                continue
            with open(path, encoding='utf-8') as f:
                tree = ast.parse(f.read())
            found += [f'mmseg_whitebox/{relative}:{node.lineno}: '
                      f'{ast.unparse(node)}' for node in _probes(tree)]
    return found


def test_every_probe_is_in_the_capability_table():
    found = probes_outside_the_table()
    assert not found, (
        'torch/mmengine probes outside mmseg_whitebox/utils/capabilities.py '
        '(add a named capability there and read it):\n' + '\n'.join(found))


def test_each_capability_answers_for_the_release_it_names():
    """torch 2.1 (legacy stack) and 2.13 (the others) checked; the
    releases in between as the docstrings date each feature."""
    assert release('2.13.0+cpu') == (2, 13) and release('2.1.2') == (2, 1)
    assert release('unknown') is None
    assert TORCH_RELEASE == release(torch.__version__)
    assert capabilities.TORCH_VERSION == torch.__version__
    assert capabilities.AUTOCAST_DEVICE_QUERIES == (TORCH_RELEASE >= (2, 4))
    assert (capabilities.COMPILER_IS_COMPILING is not None) == (
        TORCH_RELEASE >= (2, 3))
    assert capabilities.onnx_dynamo_export() == (TORCH_RELEASE >= (2, 5))
    assert capabilities.dynamo_recompile_limit_key() == (
        'recompile_limit' if TORCH_RELEASE >= (2, 6) else 'cache_size_limit')
    for gate in (capabilities.COMPILES_CAPTURED_SCALARS,
                 capabilities.DDP_GRAPH_SPLIT_TAKES_SUBMODULES):
        assert gate == (TORCH_RELEASE >= (2, 4))
