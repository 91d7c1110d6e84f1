"""verl's custom reward function for the toy task: `reward.custom_reward_function.path=<this file>`
(benchmarks/verl_smoke.py trains on the toy task, whose data_source verl's own scorer does not know).
verl loads this file by path and calls `compute_score(data_source=, solution_str=, ground_truth=,
extra_info=)`; other data sources go to verl's default scorer."""
from opd.backends.verl.data import TOY_SOURCE, score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if data_source == TOY_SOURCE:
        return score(data_source, solution_str, ground_truth)
    from verl.utils.reward_score import default_compute_score
    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
