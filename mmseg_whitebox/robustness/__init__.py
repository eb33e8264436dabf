"""Parameter-perturbation robustness: noise sweeps over attention weights,
with the clean and attention-ablated references that make them honest."""
from .evaluation import (LoopEvaluation, NonFiniteCounter, RunnerEvaluation,
                         build_test_runner)
from .perturbation import ParameterNoise
from .selection import NAMED_TARGETS, Selection, select_parameters
from .sites import (AttentionSite, ablate_attention, find_attention_sites,
                    measure_attention_usage)
from .sweep import PAPER_SIGMAS, NoiseSweep, ResultStore, attention_unused

__all__ = [
    'AttentionSite', 'LoopEvaluation', 'NAMED_TARGETS', 'NoiseSweep',
    'NonFiniteCounter', 'PAPER_SIGMAS', 'ParameterNoise', 'ResultStore',
    'RunnerEvaluation', 'Selection', 'ablate_attention', 'attention_unused',
    'build_test_runner', 'find_attention_sites', 'measure_attention_usage',
    'select_parameters'
]
