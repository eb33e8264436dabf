"""Shared fixtures. Importing mmseg_whitebox first applies the compat layer
and registers every module, as the tools do."""
import pytest

import mmseg_whitebox  # noqa: F401


@pytest.fixture(scope='session')
def tiny_ade(tmp_path_factory) -> str:
    """A tiny synthetic ADE20K-layout dataset (appearance variant)."""
    from mmseg_whitebox.datasets.synthetic_ade20k import \
        generate_synthetic_ade20k
    out = tmp_path_factory.mktemp('tiny_ade')
    return generate_synthetic_ade20k(
        str(out), num_train=8, num_val=3, image_size=(96, 112), seed=1)
