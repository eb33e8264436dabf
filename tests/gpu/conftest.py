"""The GPU smoke check's run, shared by the tests of test_gpu_smoke.py, and
its table: with ``--gpu-out DIR`` (``make gpu-check``) the session ends by
writing ``gpu_smoke.md`` and ``gpu_smoke.json`` there (``ddp.log`` too)."""
import pytest
import torch

from _smoke import GPU_PLAN
from _smoke_run import REPORT, SmokeRun

RUN = pytest.StashKey()


@pytest.fixture(scope='session')
def gpu_run(request, tmp_path_factory) -> SmokeRun:
    """:data:`~_smoke.GPU_PLAN` on the current CUDA device, each model
    trained when a test first asks for it."""
    out = request.config.getoption('gpu_out') or str(
        tmp_path_factory.mktemp('gpu_check'))
    run = SmokeRun(GPU_PLAN, torch.device('cuda'), out)
    request.config.stash[RUN] = run
    return run


def pytest_sessionfinish(session):
    run = session.config.stash.get(RUN, None)
    if run is not None and session.config.getoption('gpu_out'):
        run.write()
        session.config.pluginmanager.get_plugin('terminalreporter') \
            .write_line(f'GPU smoke check written to {run.out_dir}: '
                        f'{REPORT}, gpu_smoke.json')
