"""Per-image values of a distributed evaluation, put together over ranks.

In a distributed test each process sees every ``world_size``-th image
(mmengine's ``DefaultSampler``: rank ``r`` gets images ``r``, ``r + W``,
...), and the last ones are padded with repeated images so that every
rank has as many. mmengine's metrics gather their per-image results in
that interleaved order and cut the padding off at the data set's size
(``mmengine.dist.collect_results``); :func:`gather_images` does the same
for any other per-image statistic, so that a statistic of N processes is
the one-process statistic, in the same order (sums, means, minima over
it are then equal bit for bit).
"""
from __future__ import annotations

import itertools
from typing import Any, List, Optional, Sequence


def gather_images(values: Sequence[Any],
                  num_images: Optional[int] = None) -> List[Any]:
    """Every rank's ``values`` (one per image, in the order the rank saw
    its images), on every rank, in the data set's order, the padding cut
    off at ``num_images`` (the data set's size; None keeps every value,
    the padded images too). One process: ``values`` as they are. Every
    rank must call it (a collective)."""
    from mmengine.dist import all_gather_object, get_world_size
    if get_world_size() == 1:
        return list(values)
    parts = all_gather_object(list(values))
    missing = object()  # a rank with fewer images (no padding)
    ordered = [value for group in itertools.zip_longest(
        *parts, fillvalue=missing) for value in group if value is not missing]
    return ordered if num_images is None else ordered[:num_images]
