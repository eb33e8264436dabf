"""Parameter-perturbation robustness: noise sweeps over attention weights,
with the clean and attention-ablated references that make them honest,
summary metrics, parameter groups and subspace diagnostics. (Where a
model's attention sits: :mod:`mmseg_whitebox.models.attention_sites`.)"""
from mmseg_whitebox.models.attention_sites import (AttentionAblation,
                                                   AttentionSite,
                                                   AttentionUsage,
                                                   find_attention_sites)
from .compare import compare_sweeps
from .evaluation import LoopEvaluation, RunnerEvaluation
from .groups import GROUPS, group_selections, parameter_groups
from .noise_robustness import format_summary, run_noise_sweep
from .perturbation import ParameterNoise
from .selection import (NAMED_TARGETS, Selection, select_layers,
                        select_parameters)
from .subspaces import principal_angles, subspace_change
from .summary import (attention_unused, mean_ci, normalized_auc,
                      sigma_at_fraction, summarize_results)
from .sweep import NoiseSweep, ResultStore
from .sweep_options import PAPER_SIGMAS, NoiseSweepOptions

__all__ = [
    'AttentionAblation', 'AttentionSite', 'AttentionUsage', 'GROUPS',
    'LoopEvaluation', 'NAMED_TARGETS', 'NoiseSweep', 'NoiseSweepOptions',
    'PAPER_SIGMAS', 'ParameterNoise', 'ResultStore', 'RunnerEvaluation',
    'Selection', 'attention_unused',
    'compare_sweeps', 'find_attention_sites',
    'format_summary', 'run_noise_sweep',
    'group_selections', 'mean_ci', 'normalized_auc', 'parameter_groups',
    'principal_angles', 'select_layers', 'select_parameters',
    'sigma_at_fraction', 'subspace_change', 'summarize_results'
]
