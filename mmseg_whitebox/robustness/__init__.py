"""Parameter-perturbation robustness: noise sweeps over attention weights,
with the clean and attention-ablated references that make them honest."""
from .evaluation import (LoopEvaluation, NonFiniteCounter, RunnerEvaluation,
                         build_test_runner)
from .perturbation import ParameterNoise
from .selection import (NAMED_TARGETS, Selection, select_layers,
                        select_parameters)
from .sites import (AttentionAblation, AttentionSite, AttentionUsage,
                    find_attention_sites)
from .sweep import (PAPER_SIGMAS, NoiseSweep, ResultStore, attention_unused,
                    check_sweep_settings)

__all__ = [
    'AttentionAblation', 'AttentionSite', 'AttentionUsage', 'LoopEvaluation',
    'NAMED_TARGETS', 'NoiseSweep', 'NonFiniteCounter', 'PAPER_SIGMAS',
    'ParameterNoise', 'ResultStore', 'RunnerEvaluation', 'Selection',
    'attention_unused', 'build_test_runner', 'check_sweep_settings',
    'find_attention_sites', 'select_layers', 'select_parameters'
]
