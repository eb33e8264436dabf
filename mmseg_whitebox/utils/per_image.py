"""Per-image values of a distributed evaluation, put together over ranks
as mmengine's metrics gather theirs (``collect_results``): interleaved
back into the data set's order, the sampler's padding cut off, so that a
statistic of N processes equals the one-process one bit for bit.
"""
from __future__ import annotations

import itertools
from typing import Any, List, Optional, Sequence


def gather_images(values: Sequence[Any],
                  num_images: Optional[int] = None) -> List[Any]:
    """Every rank's ``values`` (one per image, in the rank's order), on
    every rank, in the data set's order, cut off at ``num_images`` (None
    keeps the padding). A collective."""
    from mmengine.dist import all_gather_object, get_world_size
    if get_world_size() == 1:
        return list(values)
    parts = all_gather_object(list(values))
    missing = object()  # a rank with fewer images (no padding)
    ordered = [value for group in itertools.zip_longest(
        *parts, fillvalue=missing) for value in group if value is not missing]
    return ordered if num_images is None else ordered[:num_images]
