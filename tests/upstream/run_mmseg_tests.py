"""mmseg's own unit tests, run with this package imported: importing
mmseg_whitebox must never break mmseg (``make mmseg-tests``, on either
stack; CI runs it on both).

The tests come from the source distribution of the installed mmseg
(mmsegmentation or onedl-mmsegmentation, the same version, from the
package index; kept under ``work_dirs/upstream-tests/``). Their
``configs/`` link to the configs the installed package carries (the
source distribution has none). pytest runs them with the plugin
:mod:`mmseg_whitebox_imported`, which imports this package first and
declares the failures that have other causes.

Usage: python tests/upstream/run_mmseg_tests.py [pytest arguments]
"""
from __future__ import annotations

import os
import os.path as osp
import shutil
import subprocess
import sys
import tarfile
from typing import List

HERE = osp.dirname(osp.abspath(__file__))
REPO = osp.dirname(osp.dirname(HERE))
WORK = osp.join(REPO, 'work_dirs', 'upstream-tests')


def source_distribution(dist: str, version: str) -> str:
    """The ``.tar.gz`` of ``dist==version``, downloaded once."""
    folder = osp.join(WORK, 'sdists')
    # pip names it after the project, normalised or not, by index
    names = {f'{dist.replace("-", "_")}-{version}.tar.gz'.lower(),
             f'{dist}-{version}.tar.gz'.lower()}

    def found() -> List[str]:
        return [osp.join(folder, n) for n in sorted(os.listdir(folder))
                if n.lower() in names] if osp.isdir(folder) else []

    if not found():
        subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet',
                        '--no-deps', '--no-binary', ':all:', '--dest',
                        folder, f'{dist}=={version}'], check=True)
    if not found():
        raise SystemExit(f'pip downloaded no source distribution of '
                         f'{dist}=={version} into {folder}')
    return found()[0]


def unpack_tests(archive: str, root: str) -> None:
    """``tests/`` of ``archive`` into ``root`` (replacing an earlier copy)."""
    shutil.rmtree(osp.join(root, 'tests'), ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.split('/')[1:2] == ['tests']]
        for member in members:
            member.name = member.name.split('/', 1)[1]
        tar.extractall(root, members=members, filter='data')


def link_configs(root: str) -> None:
    """``root/configs`` -> the configs the installed mmseg carries."""
    import mmseg
    configs = osp.join(osp.dirname(mmseg.__file__), '.mim', 'configs')
    link = osp.join(root, 'configs')
    if osp.isdir(configs) and not osp.lexists(link):
        os.symlink(configs, link)


def main(pytest_args: List[str]) -> int:
    from mmseg_whitebox import compat
    found = compat.stack()
    if found['name'] == 'unknown':
        raise SystemExit('no mmseg distribution is installed')
    dist = compat.STACKS[found['name']][0]
    version = found[dist]
    root = osp.join(WORK, f'{dist}-{version}')
    unpack_tests(source_distribution(dist, version), root)
    link_configs(root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    print(f"{dist} {version}'s own tests with mmseg_whitebox imported, "
          f'in {root}', flush=True)
    return subprocess.call(
        [sys.executable, '-m', 'pytest', '-p', 'mmseg_whitebox_imported',
         '-p', 'no:cacheprovider', '--rootdir', root, '-c', os.devnull,
         '-ra', 'tests'] + pytest_args, cwd=root, env=env)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
