"""The GPU smoke check (tests/gpu/_smoke.py), on a CUDA GPU: every
published decode head and the CBT encoder train in float32, bfloat16 and
float16 (losses finite, the last within 5% of float32's; the table also
gives the loss scaler's skipped steps and each attention's kernel), then
one DDP run over every visible GPU with its parameters equal across
ranks. Skips, saying why, without CUDA (and the DDP test with one GPU);
``make gpu-check`` runs it and writes the table. Its CPU dry run is
test_gpu_smoke_dry_run.py."""
import pytest
import torch

from _smoke import GPU_PLAN
from _smoke_run import DDP_ONE_GPU

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason='needs a CUDA GPU (torch sees none): run make '
                       'gpu-check on a machine with one'),
]


@pytest.mark.parametrize('precision', GPU_PLAN.precisions)
@pytest.mark.parametrize('model', GPU_PLAN.models)
def test_trains_in_every_precision(gpu_run, model, precision):
    row = gpu_run.row(model, precision)
    if row['status'].startswith('unavailable'):  # a GPU without bfloat16
        pytest.skip(row['status'])
    assert row['status'] == 'ok', row.get('traceback', row['status'])
    assert row['kernels'], 'no attention found'


def test_ddp_keeps_the_ranks_equal(gpu_run):
    row = gpu_run.ddp()
    if row['status'] == DDP_ONE_GPU:
        pytest.skip(DDP_ONE_GPU)
    assert row['status'] == 'ok', row['status']
