"""A test-only plugin that logs every dataset read of a tool run, for the
resume tests: each ``mmengine.dataset.BaseDataset.__getitem__`` call (in
the training process or a data worker) appends a line
``<split folder> <index>`` to the file :data:`READS` names in the
environment (nothing when it is unset).

A config imports it (``custom_imports = dict(imports=['mmseg_whitebox',
'read_count_plugin'])``, with this folder on ``PYTHONPATH``).
"""
import os

from mmengine.dataset import BaseDataset

#: the environment variable that names the log file
READS = 'MMSEG_WHITEBOX_TEST_READS'


def _logged(getitem):
    def __getitem__(self, idx):
        log = os.environ.get(READS)
        if log:
            folder = os.path.basename(str(
                self.data_prefix.get('img_path', '')).rstrip('/'))
            with open(log, 'a') as f:
                f.write(f'{folder} {idx}\n')
        return getitem(self, idx)

    __getitem__.logs_reads = True
    return __getitem__


if not getattr(BaseDataset.__getitem__, 'logs_reads', False):
    BaseDataset.__getitem__ = _logged(BaseDataset.__getitem__)


def training_reads(log: str) -> int:
    """How many training images the run that wrote ``log`` read."""
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return sum(line.split()[0] == 'training' for line in f)
