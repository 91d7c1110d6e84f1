"""The paper's statistics: paired bootstrap of the quality change, the fail rule, the mismatch budget
and the admission check, and this project's seed-aware interval (seeds and base-model draws). Small pure
functions of arrays and DataFrames, vectorised over resamples; results are named tuples (unpacking works
as for plain ones), options keyword-only, and the thresholds (tau, alpha, L) come from the experiment.

One module per idea, each name re-exported here (`from opd import stats; stats.verdicts(...)`):
- bootstrap: the problem bootstrap (paired_bootstrap) and the resamples it shares;
- seeds: the seed-aware interval over seeds and base-model draws (seed_bootstrap);
- rule: the pre-registered fail rule and the verdict tables built with it;
- budget: the mismatch budget B_emp(tau) and its edge;
- edges: one Delta = tau edge per mechanism and student with its interval, and the ratio of two edges;
- noise: the seed-vs-seed null distribution;
- admission: the offline estimate D_hat and the admission check;
- rl: the RL collapse rule;
- rank: the rank agreement of D with Delta;
- predictors: offline predictors of training's outcome and the fitted and frozen admission rules."""
from opd.stats.bootstrap import (
    BOOT_CHUNK, Interval, resampled_sums, COUNTS_CACHE_ELEMENTS, resample_counts, problem_resamples,
    paired_resamples, paired_bootstrap,
)
from opd.stats.seeds import (
    MIN_SEED_DF, enough_seeds, sequential_problem, draw_of, SeedVariance, seed_variance, DrawVariance,
    draw_variance, pool_draw_variance, seed_bootstrap, Replicates, seed_replicates,
)
from opd.stats.rule import (
    fails, verdict_of, final_heldout, run_mismatch, Comparison, shared_draws, compare, final_pairs,
    pooled_draw_variances, verdicts, draw_verdicts, RULE_COLUMNS, RULE_NAMES, Z95, regeneration_agreement,
    rule_fails,
)
from opd.stats.budget import (
    Budget, budget_interval, is_consistent, budget_table, baseline_scales, budget_edge, edge_point, near_edge,
    edge_counts,
)
from opd.stats.edges import (
    EDGE_RULES, Edge, EdgeRatio, isotonic, crossing, percentile, replicate_bounds, edge_interval, edge_ratio,
    mechanisms, joint_replicates, EDGE_COLUMNS, RATIO_COLUMNS, EdgeTables, edge_tables,
)
from opd.stats.noise import (
    NoiseTables, seed_noise,
)
from opd.stats.admission import (
    Estimate, ratio_se, sequence_frame, share_se, offline_estimates, prompts_for_relative_se, prompts_needed,
    admit, admission_record, RATIO_FLOOR, admission_summary,
)
from opd.stats.rl import (
    COLLAPSE_CRITERIA, RL_COLLAPSE_DEFAULTS, rl_collapse, time_to_target,
)
from opd.stats.rank import (
    RankAgreement, rank_agreement, significant_inversions, rank_table,
)
from opd.stats.predictors import (
    PREDICTORS, Threshold, fit_threshold, held_out_admits, predictor_record, nested_choice, fitted_rule,
    FittedRule, rule_label, ProspectiveTest, prospective_tests_of, fitted_rule_of,
)
