"""verl's reward function for every run (`reward.custom_reward_function.path=<this file>`, set by
opd.backends.verl.overrides): 1.0 for a right final answer, 0.0 otherwise (opd.backends.verl.data.score), as
the tiny backend scores. verl's own scorer for the paper's data (math_dapo) returns +-1, which made the
logged reward_mean (critic/score/mean) 2 x accuracy - 1; GRPO standardises rewards per group, so its
advantages are the same under either scale. verl loads this file by path and calls
`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`."""
from opd.backends.verl.data import score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return score(data_source, solution_str, ground_truth)
