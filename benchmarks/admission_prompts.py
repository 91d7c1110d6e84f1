"""How many prompts make the offline estimate's standard error at most a third of D_hat, for D_hat >= 0.01?

Every candidate engine of the toy's primary student whose pipeline D_hat (results/toy/analysis/admission.parquet,
16 prompts x 2 responses) is at least FLOOR / 2 (to bracket D_hat = FLOOR) generates N_MAX prompts x 2
responses, as the admission job does (the same student, prompts drawn the same way, the standard engine
rescoring). Per engine it prints, for the first n prompts (n = 8 ... N_MAX), D_hat and its bootstrap SE
over prompts against D_hat of all N_MAX prompts; the n from which on SE <= D_hat / 3 holds at every larger
n measured; the prompts needed from the N_MAX-prompt SE and from the pipeline's 16 (stats.prompts_needed:
the SE of a mean shrinks as 1 / sqrt(n)). The answer is the largest need, from N_MAX prompts, among the
engines whose N_MAX-prompt D_hat is at least FLOOR. Run after the pipeline:
PYTHONPATH=. python benchmarks/admission_prompts.py   (seconds per engine)"""
import time

import pandas as pd
import torch
import yaml

from opd import stats, store
from opd.backends.tiny import model as M
from opd.backends.tiny.engine import Numerics
from opd.backends.tiny.offline import _admission_prompts
from opd.backends.tiny.trainer import offline_logratios
from opd.rows import Row

N_MAX, RESPONSES, NS = 1024, 2, (8, 16, 32, 64, 128, 256, 512, 1024)
FLOOR, RATIO = 0.01, 3.0


def main():
    torch.set_num_threads(1)
    e = yaml.safe_load(open("config.yaml"))["experiments"]["toy"]
    primary, seed, task_seed = next(iter(e["students"])), e["admission"].get("seed", 0), e["train"]["task_seed"]
    rec = pd.read_parquet("results/toy/analysis/admission.parquet")
    rec = rec[(rec["student"] == primary) & rec["candidate"] & (rec["d_hat"] >= FLOOR / 2)].sort_values("d_hat")
    rows = {r["name"]: r for r in e["rows"]}
    store.require_weights(f"results/toy/_models/{primary}", "toy", "benchmarks/admission_prompts.py")
    student = M.load(f"results/toy/_models/{primary}/student.pt")
    prompts = _admission_prompts(N_MAX, RESPONSES, task_seed, seed)
    print(f"{primary}: {len(rec)} candidate engines with pipeline D_hat >= {FLOOR / 2:g}; {N_MAX} prompts x {RESPONSES} "
          f"responses each; target SE <= D_hat / {RATIO:g}")
    needed = []
    for _, r in rec.iterrows():
        t = time.perf_counter()
        sums, tokens = offline_logratios(student, Numerics.of_row(Row.of(rows[r["config"]]), seed), prompts, seed,
                                         task_seed)
        seqs = stats.sequence_frame(sums, tokens, RESPONSES)
        per = seqs.groupby("prompt")[["logratio_sum", "n_tokens"]].sum()
        table = stats.prompts_for_relative_se(per["logratio_sum"], per["n_tokens"], NS, 1 / RATIO)
        misses = table.loc[~table["meets"], "n"]
        holds = int(table["n"][table["n"] > misses.max()].min()) if len(misses) and misses.max() < N_MAX else (
            None if len(misses) else int(table["n"].min()))
        d_all, se_all = table.iloc[-1][["d_hat", "se"]]
        need = int(stats.prompts_needed(se_all, N_MAX, d_all, RATIO))
        predicted = int(stats.prompts_needed(r["se"], r["n_prompts"], r["d_hat"], RATIO))
        needed.append((r["config"], d_all, need, holds, predicted))
        print(f"\n{r['config']}: pipeline D_hat {r['d_hat']:.4f} ± {r['se']:.4f} ({int(r['n_prompts'])} prompts); "
              f"{N_MAX} prompts: {d_all:.4f} ± {se_all:.4f} ({time.perf_counter() - t:.0f} s)")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print(f"  SE <= D_hat/{RATIO:g} from n = {holds or f'> {N_MAX}'} on (measured); prompts needed from the "
              f"{N_MAX}-prompt SE: {need}; from the pipeline's 16 prompts: {predicted}")
    print("\nengine: D_hat (N_MAX prompts), prompts needed (from N_MAX), measured from, predicted from 16")
    for c, d, need, holds, predicted in needed:
        print(f"  {c}: {d:.4f}, {need}, {holds}, {predicted}")
    big = [need for _, d, need, _, _ in needed if d >= FLOOR]
    if big:
        print(f"prompts for SE <= D_hat/{RATIO:g} where D_hat >= {FLOOR} (from {N_MAX} prompts): up to {max(big)}")

if __name__ == "__main__":
    main()
