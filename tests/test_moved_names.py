"""The names moved in this release (mmseg_whitebox/_moved.py, listed in
CHANGELOG.md) still import, as the same objects, with a FutureWarning."""
import importlib
import subprocess
import sys

import pytest

from mmseg_whitebox import _moved


@pytest.mark.parametrize('old', sorted(_moved.MODULES))
def test_an_old_module_path_is_the_new_module(old):
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=f'{old} moved to '):
        module = importlib.import_module(old)
    assert module is importlib.import_module(_moved.MODULES[old])


@pytest.mark.parametrize('where,name', sorted(_moved.NAMES))
def test_a_moved_name_is_found_where_it_went(where, name):
    module, _, path = _moved.NAMES[where, name].partition(':')
    new = importlib.import_module(module)
    for attr in (path or name).split('.'):
        new = getattr(new, attr)
    assert name not in vars(importlib.import_module(where))
    with pytest.warns(FutureWarning, match=f'{where}.{name} moved to'):
        found = getattr(importlib.import_module(where), name)
    assert found == new  # bound methods are equal, not identical
    with pytest.raises(AttributeError, match='no attribute'):
        getattr(importlib.import_module(where), 'no_such_name')


def test_the_old_weights_only_module_still_runs(tmp_path):
    """``python -m mmseg_whitebox.utils.weights_only`` (printed by 0.x's
    refusals) runs its replacement command, with the warning."""
    done = subprocess.run(
        [sys.executable, '-m', 'mmseg_whitebox.utils.weights_only',
         str(tmp_path / 'missing.pth'), str(tmp_path / 'out.pth'),
         '--trust'], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "'" + str(tmp_path / 'missing.pth') + "' does not exist" in \
        done.stderr
    assert 'python -m mmseg_whitebox weights-only' in done.stderr
