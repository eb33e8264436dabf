"""What every evaluation of the robustness tools returns: its metrics
(used by both the per-setting and the shared-encoder evaluations)."""
from __future__ import annotations

from typing import Callable, Dict

Metrics = Dict[str, float]
Evaluate = Callable[[], Metrics]
