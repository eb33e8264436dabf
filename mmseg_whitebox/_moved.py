"""Names moved in 0.x -> their new homes, importable under the old name for
one release with a ``FutureWarning`` (see CHANGELOG.md).

Kept at the package root, above every layer: an old module path is an
alias of the new module (the same module object), and a name that left a
module that stays (the checkpoint hooks of ``utils.checkpoint_checks``) is
looked up where it went, so no lower layer imports a higher one for the
sake of an old name.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from typing import Any, Dict, Optional, Tuple

P = 'mmseg_whitebox'

#: old module -> new module
MODULES: Dict[str, str] = {
    f'{P}.utils.cli': f'{P}.cli',
    f'{P}.utils.errors': f'{P}.cli.errors',
    f'{P}.utils.run_checks': f'{P}.apis.run_checks',
    f'{P}.cli.run_checks': f'{P}.apis.run_checks',
    f'{P}.utils.model_index': f'{P}.engine.model_index',
    f'{P}.utils.demo_models': f'{P}.apis.demo_models',
    f'{P}.utils.state_dicts': f'{P}.converters.state_dicts',
    f'{P}.utils.weights_only': f'{P}.converters.weights_only',
    f'{P}.models.backbones.vit_conversion': f'{P}.converters.vit',
    f'{P}.models.backbones.white_box_conversion': f'{P}.converters.white_box',
    f'{P}.models.decode_heads.segmenter_conversion': f'{P}.converters.segmenter',
}

#: (module that stays, name that left it) -> the module it went to, or
#: ``module:attribute.path`` where it is now reached under another name
NAMES: Dict[Tuple[str, str], str] = {
    (f'{P}.utils.checkpoint_checks', 'CheckpointCheckHook'):
    f'{P}.engine.hooks',
    (f'{P}.utils.checkpoint_checks', 'ResumeCheckHook'): f'{P}.engine.hooks',
    (f'{P}.utils.checkpoint_checks', 'NonFiniteCounter'): f'{P}.engine.hooks',
    (f'{P}.robustness', 'NonFiniteCounter'): f'{P}.engine.hooks',
    (f'{P}.robustness.metrics', 'NonFiniteCounter'): f'{P}.engine.hooks',
    (f'{P}.robustness.metrics', 'count_nonfinite'): f'{P}.engine.hooks',
    (f'{P}.cli', 'read_config'): f'{P}.engine.config',
    (f'{P}.cli', 'check_checkpoint'): f'{P}.utils.input_checks',
    (f'{P}.cli', 'check_data_roots'): f'{P}.utils.input_checks',
    (f'{P}.cli', 'dataset_configs'): f'{P}.utils.input_checks',
    (f'{P}.apis.run_checks', 'check_work_dir'): f'{P}.utils.input_checks',
    (f'{P}.apis.run_checks', 'reported_errors'): f'{P}.utils.input_checks',
    (f'{P}.apis.run_checks', 'pretrained_urls'): f'{P}.utils.input_checks',
    (f'{P}.apis.run_checks', 'download_error_message'):
    f'{P}.utils.input_checks',
    (f'{P}.analysis.benchmark', 'peak_memory'): f'{P}.analysis.memory',
    (f'{P}.analysis.benchmark', 'cpu_peak_supported'): f'{P}.analysis.memory',
    (f'{P}.analysis.benchmark', 'extrapolate_loglog'):
    f'{P}.analysis.memory',
    (f'{P}.analysis.benchmark', 'loglog_slope'): f'{P}.analysis.report',
    (f'{P}.analysis.benchmark', 'slopes'): f'{P}.analysis.report',
    (f'{P}.analysis.benchmark', 'ratio_lines'): f'{P}.analysis.report',
    (f'{P}.analysis.benchmark', 'write_report'): f'{P}.analysis.report',
    (f'{P}.analysis.decoder_benchmark', 'add_ratios'):
    f'{P}.analysis.decoder_benchmark:BENCHMARK.add_ratios',
    (f'{P}.analysis.decoder_benchmark', 'markdown_table'):
    f'{P}.analysis.decoder_benchmark:BENCHMARK.markdown_table',
    (f'{P}.analysis.decoder_benchmark', 'head_config'):
    f'{P}.analysis.decoder_benchmark:BENCHMARK.config',
    (f'{P}.analysis.encoder_benchmark', 'add_ratios'):
    f'{P}.analysis.encoder_benchmark:BENCHMARK.add_ratios',
    (f'{P}.analysis.encoder_benchmark', 'markdown_table'):
    f'{P}.analysis.encoder_benchmark:BENCHMARK.markdown_table',
    (f'{P}.analysis.encoder_benchmark', 'encoder_config'):
    f'{P}.analysis.encoder_benchmark:BENCHMARK.config',
    (f'{P}.analysis.train_step_benchmark', 'add_ratios'):
    f'{P}.analysis.train_step_benchmark:BENCHMARK.add_ratios',
    (f'{P}.analysis.train_step_benchmark', 'markdown_table'):
    f'{P}.analysis.train_step_benchmark:BENCHMARK.markdown_table',
    (f'{P}.utils.input_checks', 'CfgOptionsAction'): f'{P}.cli.options',
    (f'{P}.cli.errors', 'BadFileError'): f'{P}.utils.tool_error',
    (f'{P}.cli.errors', 'OverwriteError'): f'{P}.utils.tool_error',
}

#: old ``python -m`` module -> the command that replaces it
COMMANDS: Dict[str, str] = {f'{P}.utils.weights_only': 'weights-only'}


def warn_moved(old: str, new: str) -> None:
    warnings.warn(f'{old} moved to {new}; the old name will be removed in '
                  'the next release', FutureWarning, stacklevel=3)


#: the modules names left
_LEFT = {module for module, _ in NAMES}


class _AddLookupAfterExec(importlib.abc.Loader):
    """A module's own loader, then the lookup of the names that left it."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _add_lookup(module)

    def __getattr__(self, name: str) -> Any:  # get_code, is_package, ...
        return getattr(self.loader, name)


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as its new module, and adds the lookup of
    moved names to the modules they left."""

    def __init__(self) -> None:
        self._finding: set = set()

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname in MODULES:
            return importlib.machinery.ModuleSpec(fullname, self)
        if fullname in _LEFT and fullname not in self._finding:
            # a module some names left: its own spec, and the lookup of
            # those names added once it ran
            self._finding.add(fullname)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                self._finding.discard(fullname)
            if spec is not None and spec.loader is not None:
                spec.loader = _AddLookupAfterExec(spec.loader)
            return spec
        return None

    def create_module(self, spec: Any) -> Any:
        warn_moved(spec.name, MODULES[spec.name])
        return importlib.import_module(MODULES[spec.name])

    def exec_module(self, module: Any) -> None:
        pass  # the new module ran when it was imported

    def get_code(self, fullname: str) -> Any:
        """``python -m <old module>``: run the command that replaced it."""
        command = COMMANDS.get(fullname)
        if command is None:
            raise ImportError(f'{fullname} moved to {MODULES[fullname]}, '
                              'which cannot be run with python -m')
        warn_moved(fullname, f'python -m {P} {command}')
        return compile(f'from {P}.commands import run_command\n'
                       f'run_command({command!r})\n', fullname, 'exec')


def resolve(old: str, new: str, name: str) -> Any:
    """The object ``new`` names (``module`` holding ``name``, or
    ``module:attribute.path``), with the warning that ``old`` moved."""
    module, _, path = new.partition(':')
    warn_moved(old, f'{module}.{path or name}')
    found = importlib.import_module(module)
    for attr in (path or name).split('.'):
        found = getattr(found, attr)
    return found


def _add_lookup(module: Any) -> None:
    """``module.<moved name>`` finds the name where it went (after the
    module's own ``__getattr__``, if it has one)."""
    previous = module.__dict__.get('__getattr__')
    if getattr(previous, '_moved', False):
        return
    module_name = module.__name__

    def __getattr__(name: str) -> Any:
        new = NAMES.get((module_name, name))
        if new is None:
            if previous is not None:
                return previous(name)
            raise AttributeError(
                f'module {module_name!r} has no attribute {name!r}')
        return resolve(f'{module_name}.{name}', new, name)

    __getattr__._moved = True
    module.__getattr__ = __getattr__


def install() -> None:
    """Make the old names importable (idempotent); nothing is imported for
    it."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
    for module_name in _LEFT:
        if module_name in sys.modules:
            _add_lookup(sys.modules[module_name])
