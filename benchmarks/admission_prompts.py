"""How many prompts make the offline estimate's standard error at most a third of D_hat, for D_hat >= 0.01?

Every candidate engine of the toy's primary student whose pipeline D_hat (results/toy/analysis/admission.parquet,
16 prompts x 2 responses) is at least 0.01 generates N_MAX prompts x 2 responses, as the admission job
does (the same student, prompts drawn the same way, the standard engine rescoring). For the first n
prompts (n = 8 ... N_MAX) it prints D_hat and its bootstrap SE over prompts against D_hat of all N_MAX
prompts, the smallest n that meets SE <= D_hat / 3, and the prediction from the pipeline's 16 prompts
(stats.prompts_needed: the SE of a mean shrinks as 1 / sqrt(n)). Run after the pipeline:
python benchmarks/admission_prompts.py   (about a minute per engine on one core)"""
import time

import pandas as pd
import torch
import yaml

from opd import stats
from opd.backends.tiny import model as M
from opd.backends.tiny.engine import Numerics
from opd.backends.tiny.offline import _admission_prompts
from opd.backends.tiny.trainer import offline_logratios
from opd.rows import Row

N_MAX, RESPONSES, NS = 256, 2, (8, 16, 32, 64, 128, 256)
FLOOR, RATIO = 0.01, 3.0


def main():
    torch.set_num_threads(1)
    e = yaml.safe_load(open("config.yaml"))["experiments"]["toy"]
    primary, seed, task_seed = next(iter(e["students"])), e["admission"].get("seed", 0), e["train"]["task_seed"]
    rec = pd.read_parquet("results/toy/analysis/admission.parquet")
    rec = rec[(rec["student"] == primary) & rec["candidate"] & (rec["d_hat"] >= FLOOR)].sort_values("d_hat")
    rows = {r["name"]: r for r in e["rows"]}
    student = M.load(f"results/toy/_models/{primary}/student.pt")
    prompts = _admission_prompts(N_MAX, RESPONSES, task_seed, seed)
    print(f"{primary}: {len(rec)} candidate engines with pipeline D_hat >= {FLOOR}; {N_MAX} prompts x {RESPONSES} "
          f"responses each; target SE <= D_hat / {RATIO:g}")
    needed = []
    for _, r in rec.iterrows():
        t = time.perf_counter()
        sums, tokens = offline_logratios(student, Numerics.of_row(Row.of(rows[r["config"]]), seed), prompts, seed,
                                         task_seed)
        seqs = stats.sequence_frame(sums, tokens, RESPONSES)
        per = seqs.groupby("prompt")[["logratio_sum", "n_tokens"]].sum()
        table = stats.prompts_for_relative_se(per["logratio_sum"], per["n_tokens"], NS, 1 / RATIO)
        meets = table.loc[table["meets"], "n"]
        first = int(meets.iloc[0]) if len(meets) else None
        predicted = int(stats.prompts_needed(r["se"], r["n_prompts"], r["d_hat"], RATIO))
        needed.append((r["config"], first, predicted))
        print(f"\n{r['config']}: pipeline D_hat {r['d_hat']:.4f} ± {r['se']:.4f} ({int(r['n_prompts'])} prompts); "
              f"D_hat of {N_MAX} prompts {per['logratio_sum'].sum() / per['n_tokens'].sum():.4f} "
              f"({time.perf_counter() - t:.0f} s)")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print(f"  smallest n measured with SE <= D_hat/{RATIO:g}: {first or f'> {N_MAX}'}; "
              f"predicted from the pipeline's 16 prompts: {predicted}")
    print("\nsummary (engine: measured, predicted):", "; ".join(f"{c}: {m}, {p}" for c, m, p in needed))
    worst = [m for _, m, _ in needed if m]
    if worst and all(m for _, m, _ in needed):
        print(f"prompts for SE <= D_hat/{RATIO:g} on every engine with D_hat >= {FLOOR}: {max(worst)} (of {NS})")


if __name__ == "__main__":
    main()
