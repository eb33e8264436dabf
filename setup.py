"""Build hook; the metadata is in pyproject.toml.

A wheel carries the repository's ``configs/`` and ``tools/`` as package
data in ``mmseg_whitebox/.mim/`` with a ``model-index.yml`` listing the
metafiles, the layout mmseg and mmengine use for an OpenMMLab package, so
that configs are found by name and the tools run after a plain ``pip
install`` (``mmseg_whitebox.apis.config_path``, ``mmseg_whitebox.commands``).
They are copied into the build folder only, never into the source tree.
An editable install copies nothing: the package then finds the checkout's
own ``configs/`` and ``tools/`` (``mmseg_whitebox.apis.resources_root``).
The sdist carries both folders (MANIFEST.in), so a wheel built from it is
the same.
"""
import glob
import os
import os.path as osp
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PACKAGE = 'mmseg_whitebox'
#: folders of the repository copied into the package's .mim folder
RESOURCE_DIRS = ('configs', 'tools')
#: never packaged (bytecode, editor and test leftovers)
IGNORED = shutil.ignore_patterns('__pycache__', '*.py[cod]', '.*')
HERE = osp.dirname(osp.abspath(__file__))


def write_model_index(mim_dir: str) -> str:
    """``model-index.yml`` importing every ``configs/*/metafile.yaml``, as
    in mmseg's ``.mim`` (the index OpenMMLab's tools read; this package
    finds its ``.mim`` folder by it)."""
    metafiles = sorted(
        osp.relpath(path, mim_dir).replace(os.sep, '/')
        for path in glob.glob(osp.join(mim_dir, 'configs', '*',
                                       'metafile.yaml')))
    path = osp.join(mim_dir, 'model-index.yml')
    with open(path, 'w') as f:
        f.write('Import:\n' + ''.join(f'- {m}\n' for m in metafiles))
    return path


class BuildWithResources(build_py):
    """``build_py`` that also copies ``configs/`` and ``tools/`` into
    ``<build_lib>/mmseg_whitebox/.mim`` (replacing an older copy, so that a
    file deleted from the repository leaves no stale copy behind)."""

    def run(self) -> None:
        super().run()
        if getattr(self, 'editable_mode', False):
            return  # the package finds the checkout's folders itself
        self.resource_outputs = self.copy_resources()

    def copy_resources(self) -> list:
        mim_dir = osp.join(self.build_lib, PACKAGE, '.mim')
        if osp.isdir(mim_dir):
            shutil.rmtree(mim_dir)
        os.makedirs(mim_dir)
        for name in RESOURCE_DIRS:
            source = osp.join(HERE, name)
            if not osp.isdir(source):
                raise FileNotFoundError(
                    f'{source} is missing: a wheel of {PACKAGE} needs the '
                    f'repository\'s {", ".join(RESOURCE_DIRS)} folders')
            shutil.copytree(source, osp.join(mim_dir, name), ignore=IGNORED)
        write_model_index(mim_dir)
        return [
            osp.join(folder, file)
            for folder, _, files in os.walk(mim_dir) for file in files
        ]

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return (super().get_outputs(include_bytecode) +
                list(getattr(self, 'resource_outputs', [])))


setup(cmdclass={'build_py': BuildWithResources})
