"""The package's import graph: no cycles, and no module imports one of a
higher layer, each package a layer of its own, in one order (utils <
compat < ops < models < engine < datasets < visualization < converters <
robustness < deployment < analysis < apis < cli < the package root;
tools sit above the package). Function-local imports count as imports: they only hide a
cycle or an upward dependency from the interpreter."""
import ast
import os
import os.path as osp
from typing import Dict, List, Set, Tuple

from _helpers import REPO

PACKAGE = 'mmseg_whitebox'

#: the packages, lowest first: a module imports from its own package or
#: from those before it
ORDER = ('utils', 'compat', 'ops', 'models', 'engine', 'datasets',
         'visualization', 'converters', 'robustness', 'deployment',
         'analysis', 'apis', 'cli')
#: the layer of each package (a module is in its package's layer)
LAYERS = {f'{PACKAGE}.{name}': rank for rank, name in enumerate(ORDER)}
#: the package root imports everything to register it
LAYERS[PACKAGE] = len(ORDER) + 1
#: the root's own modules: the version is data; the commands run the
#: tools (the root's layer). The compatibility layer (a package) runs
#: before anything else: right above the utils it loads checkpoints with.
ROOT_MODULES = {
    f'{PACKAGE}.version': LAYERS[f'{PACKAGE}.utils'],
    f'{PACKAGE}.commands': LAYERS[PACKAGE],
    f'{PACKAGE}.__main__': LAYERS[PACKAGE],
}


def layer(module: str) -> int:
    """The layer of ``module``: its root module's, or its package's (the
    first two parts of its name); no module has a layer of its own."""
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    package = '.'.join(module.split('.')[:2])
    if package not in LAYERS:
        raise KeyError(f'{module} has no layer: add {package} to LAYERS')
    return LAYERS[package]


def package_modules() -> Dict[str, str]:
    """Module name -> file, for every module of the package."""
    modules = {}
    for folder, _, files in os.walk(osp.join(REPO, PACKAGE)):
        for name in files:
            if name.endswith('.py'):
                path = osp.join(folder, name)
                module = osp.relpath(path, REPO)[:-3].replace(os.sep, '.')
                modules[module.removesuffix('.__init__')] = path
    return modules


def imported_modules(module: str, path: str, node: ast.AST,
                     modules: Dict[str, str]) -> Set[str]:
    """The package modules one import statement loads, its own
    ancestors (already loaded before it runs) left out."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ''
        if node.level:
            package = module if path.endswith('__init__.py') else \
                module.rsplit('.', 1)[0]
            package = '.'.join(package.split('.')[:len(
                package.split('.')) - node.level + 1])
            base = f'{package}.{base}' if base else package
        submodules = [f'{base}.{a.name}' for a in node.names
                      if f'{base}.{a.name}' in modules]
        targets = (submodules if len(submodules) == len(node.names) else
                   [base] + submodules)
    found = set()
    for target in targets:
        while target not in modules and '.' in target:
            target = target.rsplit('.', 1)[0]
        if target in modules and not module.startswith(target + '.') \
                and target != module:
            found.add(target)
    return found


def run_at_import(node: ast.AST) -> Set[ast.AST]:
    """The import statements outside any function body under ``node``."""
    found = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.add(child)
        elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                    ast.Lambda)):
            found |= run_at_import(child)
    return found


def import_graph() -> Tuple[Dict[str, Set[str]], List[str]]:
    """Every package module's imports of package modules (wherever the
    statement stands), and ``file:line`` of the function-local ones."""
    modules = package_modules()
    graph, local = {}, []
    for module, path in modules.items():
        tree = ast.parse(open(path).read(), path)
        graph[module] = set()
        top_level = run_at_import(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = imported_modules(module, path, node, modules)
                graph[module] |= targets
                if targets and node not in top_level:
                    local.append(f'{osp.relpath(path, REPO)}:{node.lineno}')
    return graph, local


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph, _ = import_graph()
    assert cycles(graph) == []


def upward_imports(graph: Dict[str, Set[str]]) -> List[str]:
    """``a -> b`` for every import of a module of a higher layer."""
    return sorted(f'{a} -> {b}' for a, targets in graph.items()
                  for b in targets if layer(b) > layer(a))


def test_no_import_from_a_higher_layer():
    graph, _ = import_graph()
    assert upward_imports(graph) == []


def test_the_probes_see_cycles_and_upward_imports():
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}
    assert cycles(graph) == [['a', 'b', 'c']]
    assert layer(f'{PACKAGE}.ops.cbsa') < layer(f'{PACKAGE}.models.layers')
    # an upward import is seen: the coding rate (analysis) may use the
    # attention sites (models); the same edge the other way round may not
    graph, local = import_graph()
    edge = (f'{PACKAGE}.analysis.coding_rate',
            f'{PACKAGE}.models.attention_sites')
    assert edge[1] in graph[edge[0]]
    reversed_graph = {edge[1]: {edge[0]}, edge[0]: set()}
    assert upward_imports(reversed_graph) == [f'{edge[1]} -> {edge[0]}']
    assert upward_imports(graph) == []
    # a function-local import is seen (compat loads the checkpoint checks
    # only when a checkpoint is loaded, after its shims are in place)
    checkpoints = osp.join(PACKAGE, 'compat', 'checkpoints.py')
    assert any(p.startswith(checkpoints) for p in local)
    assert f'{PACKAGE}.utils.checkpoint_checks' in \
        graph[f'{PACKAGE}.compat.checkpoints']


def test_every_module_has_its_package_layer():
    """One layer per package: every module's layer is its package's (or a
    root module's), so no module can be given a layer of its own, and no
    two packages share a layer."""
    for module in package_modules():
        assert layer(module) in LAYERS.values()
    assert len(set(LAYERS.values())) == len(LAYERS)
    assert [layer(f'{PACKAGE}.{name}') for name in ORDER] == \
        list(range(len(ORDER)))
    assert layer(f'{PACKAGE}.converters.state_dicts') == \
        LAYERS[f'{PACKAGE}.converters']
    assert layer(f'{PACKAGE}.engine.config_checks') < layer(f'{PACKAGE}.cli')
