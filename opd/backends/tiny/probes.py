"""Gradient probes of the paper's mechanism (its "Mechanism" section; issue #15), exact over the vocabulary.

At a prefix h (a prompt and the first t tokens of a response) three next-token distributions over the
tiny task's V = 17 tokens: the trainer's p = p_theta(.|h) (fp32), the rollout engine's q = q(.|h) (the
row's numerics: BF16, noisy or quantised weights, FP8 KV cache; with staleness k the weights of k
optimizer steps earlier) and the teacher's p_T(.|h). Every sum over tokens v below is exact (all V terms,
float64); only the prefixes are sampled, with seeded generators.

OPD, for every token v: A_v = log p_T(v|h) - log p(v|h), and in logit space (z = the trainer's logits at h)

    u(h)   = sum_v p_v A_v (e_v - p)      the exact expected OPD update when the trainer samples the token
                                          (the gradient of E_{v~p}[A_v log p_v] in z with A held fixed)
    u_q(h) = sum_v q_v A_v (e_v - p)      the same when the engine samples it
    g_bias = u_q - u = delta * A - p (delta . A),   delta = q - p
    ||g_bias||_2 <= ||g_bias||_1 <= ||delta * A||_1 + |delta . A| ||p||_1 <= 2 ||delta||_1 ||A||_inf

so the bias vanishes as the student reaches the teacher (A -> 0) whatever the engine.
REINFORCE: A_v replaced by the reward R in {0, 1} of the response h belongs to (the trainer's A_t = R;
one number for every v at h):

    u^RL(h) = R sum_v p_v (e_v - p) = 0,   u_q^RL(h) = R delta,   g_bias^RL = R delta  (bound 2 ||delta||_1 |R|)

Its per-prefix expected update is exactly zero (REINFORCE learns only from the correlation between the
sampled tokens and R, which a fixed R at one prefix cannot show) and its error R delta does not shrink as
the student improves; it grows with the share of rewarded responses. So for REINFORCE the update scale is
the one the trainer applies, sampled: U^RL_sampled = || mean_{h in H_p} R (e_{y_h} - p(.|h)) || (y_h the
token the trainer's policy sampled at h); OPD's sampled counterpart (A_{y_h} in place of R) is reported too.

Sets of prefixes: H_q = every response position of responses the engine samples; H_p = the same prompts
with the same random numbers, sampled by the trainer's own policy (an fp32 engine with the student's
weights): common random numbers, so where q = p the two sets are the same prefixes.

    T = || mean_{h in H_q} (u_q(h) - u(h)) ||        per-token error (same prefixes, other token distribution)
    S = || mean_{h in H_q} u(h) - mean_{h in H_p} u(h) ||   prefix shift (same exact update, other prefixes)
    U = || mean_{h in H_p} u(h) ||                   the ideal update; T and S are reported absolute and / U

in two spaces:
  - logit: the V-vectors averaged over prefixes as the issue writes them (vectors of different prefixes
    share one V-dimensional space; they can cancel there);
  - param: pulled back through the trainer's network, mean_h J_h^T v(h) with J_h = dz(h)/dtheta: one
    backward pass of sum_h <stopgrad v(h), log p(.|h)> / |H| per vector field (every v here sums to 0
    over tokens, so its gradient through log_softmax is v itself). This is the update the optimizer sees.
Fixed prefixes: H_f = H_p of the step-0 student (the same prefixes for every row of a student and every
probed step): error_f = || mean_{H_f} (u_q - u) ||, update_f = || mean_{H_f} u ||, and their ratio.

Choices where the paper is ambiguous (each made in one place):
  - prefixes are weighted equally in every mean (the trainer's loss is a mean over tokens): `_mean`;
  - the norm is Euclidean (over the V logits, or over all parameters): `_norm`;
  - q on a prefix is computed as the engine decodes (prompt into its KV cache, then one token at a time),
    fed the prefix's tokens: on its own rollouts exactly the numbers it sampled from: `engine_logq`;
  - fixed prefixes are the trainer's own prefixes at step 0: `fixed_prefixes`, in `probe_states`;
  - REINFORCE is probed on the OPD runs' weights and engines (same student, same q; R = the task reward);
  - the probed steps are the runs' evaluation steps (0, 25, ..., the last), set by the rule; the sampled
    prefixes make T and S estimates, so the first and last steps are probed again with other probe seeds
    (other prompts and draws) to show their spread.

The weights probed. The probes run inside a probed run's own training job (`train_job`, for runs whose
spec has "probes"): the trainer keeps the policy versions the probed steps need (each probed step and, for
staleness k, the engine's version k steps earlier; kept in the checkpoint, so a resumed run probes the same
weights) and, once the run has trained, the probes read them and write the run's probes.parquet and
probes_prefix.parquet. Probing after training leaves every training draw and number as an unprobed run's.
The mechanism stage concatenates the probed runs' files (workflow/scripts/probes.py).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd
import torch

from opd import store
from opd.spec import Probes, TrainSpec

from . import model as M
from .engine import Engine, KVCache, Numerics, Rollout, engine_version, step_generator, token_logprobs
from .task import RESPONSE_LEN, calibration_batch, make_task

PROBE_STREAM = 15  # the probes' own random stream (prompts, sampling, subsample), apart from training's
PERSIST_STEPS = 4  # step0_statistics: the steps whose engines a redrawn-noise row's persistence averages over
RUN_DRAWS = 16  # step0_statistics: the steps' engines from which a redrawn-noise row's run-horizon error is estimated


# ---------------------------------------------------------------- exact per-prefix terms

def _norm(x: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(x.double()))


def _mean(v: torch.Tensor) -> torch.Tensor:
    """Mean over prefixes (rows) of per-prefix vectors: every prefix counts once."""
    return v.mean(0)


def opd_terms(logp: torch.Tensor, logq: torch.Tensor, logt: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per prefix (rows of (N, V) log-probabilities): u, u_q, g_bias = delta*A - p (delta.A) and its bound
    2 ||delta||_1 ||A||_inf. float64."""
    logp, logq, logt = logp.double(), logq.double(), logt.double()
    p, q = logp.exp(), logq.exp()
    a = logt - logp
    delta = q - p
    u = p * a - p * (p * a).sum(-1, keepdim=True)
    u_q = q * a - p * (q * a).sum(-1, keepdim=True)
    g = delta * a - p * (delta * a).sum(-1, keepdim=True)
    bound = 2 * delta.abs().sum(-1) * a.abs().amax(-1)
    return {"u": u, "u_q": u_q, "g": g, "bound": bound, "delta": delta, "a": a}


def check_bound(terms: dict[str, torch.Tensor], name: str = "opd") -> None:
    """||g_bias||_1 <= 2 ||delta||_1 ||A||_inf on every prefix (so also in the Euclidean norm); raises if not."""
    l1 = terms["g"].abs().sum(-1)
    bad = l1 > terms["bound"] * (1 + 1e-9) + 1e-300
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise AssertionError(f"{name}: ||g_bias||_1 = {float(l1[i]):.3g} > bound {float(terms['bound'][i]):.3g} "
                             f"on {int(bad.sum())} of {len(l1)} prefixes")


def reinforce_terms(logp: torch.Tensor, logq: torch.Tensor, reward: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per prefix: the REINFORCE bias R delta (u^RL = 0 exactly) and its bound 2 ||delta||_1 |R|."""
    delta = logq.double().exp() - logp.double().exp()
    r = reward.double()[:, None]
    return {"g": r * delta, "bound": 2 * delta.abs().sum(-1) * r[:, 0].abs()}


def sampled_update(logp: torch.Tensor, tokens: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Per prefix: adv (e_y - p), the update the trainer applies for the sampled token y."""
    p = logp.double().exp()
    e = torch.nn.functional.one_hot(tokens, p.shape[-1]).double()
    return adv.double()[:, None] * (e - p)


# ---------------------------------------------------------------- distributions on a rollout's prefixes

def sample(engine: Engine, prompts: torch.Tensor, seed: int) -> Rollout:
    return engine.generate(prompts, step_generator(seed, PROBE_STREAM))


@torch.no_grad()
def engine_logq(engine: Engine, roll: Rollout) -> torch.Tensor:
    """The engine's next-token log-probabilities (B, R, V) at every response position of `roll`, computed
    as the engine decodes: its network (weights after the row's numerics, its dtype) reads the prompt into
    its KV cache, then takes the response one token at a time through that cache (an FP8 cache stores and
    reads every key and value as in sampling). On the engine's own rollout these are the very numbers it
    sampled from."""
    B, P = roll.prompts.shape
    R = roll.responses.shape[1]
    cache = KVCache(engine.cfg, B, P + max(R, RESPONSE_LEN), engine.numerics)
    logits = engine.model(roll.prompts, cache, 0)[:, -1]
    out = [logits.float().log_softmax(-1)]
    for t in range(R - 1):
        logits = engine.model(roll.responses[:, t:t + 1], cache, P + t)[:, -1]
        out.append(logits.float().log_softmax(-1))
    return torch.stack(out, 1)


def trainer_engine(cfg: M.ModelConfig, state: dict) -> Engine:
    """The trainer's own policy as a sampler: fp32, the student's weights, no row numerics."""
    e = Engine(cfg, Numerics(dtype=torch.float32))
    e.load(state)
    return e


class Pullback:
    """Parameter-space images of per-prefix logit-space vectors on one rollout, one forward pass."""

    def __init__(self, student: M.Decoder, roll: Rollout):
        self.params = [p for p in student.parameters()]
        self.mask = roll.mask
        _, full = token_logprobs(student, roll)
        self.logp_full = full
        self.logp = full[roll.mask].detach()  # (N, V): the prefixes in row-major order

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        """mean_h J_h^T v(h) for v (N, V), as one flat vector."""
        field = torch.zeros(self.logp_full.shape, dtype=torch.float32)
        field[self.mask] = v.float()
        surrogate = (field * self.logp_full).sum() / len(v)
        grads = torch.autograd.grad(surrogate, self.params, retain_graph=True, allow_unused=True)
        return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1).double()
                          for g, p in zip(grads, self.params)])


@torch.no_grad()
def teacher_logp(teacher: M.Decoder, roll: Rollout) -> torch.Tensor:
    return token_logprobs(teacher, roll)[1][roll.mask]


def prefix_rewards(roll: Rollout, rewards: np.ndarray) -> torch.Tensor:
    """The reward of its response at every prefix (N,), row-major like `x[roll.mask]`."""
    r = torch.as_tensor(rewards, dtype=torch.float64)[:, None].expand(roll.mask.shape)
    return r[roll.mask]


# ---------------------------------------------------------------- one probe: a student, an engine, prompts

@dataclass
class Probe:
    numerics: Numerics  # the engine's (Numerics.of_row(row, the run's seed))
    probe_seed: int
    prompts: torch.Tensor
    idx: np.ndarray  # training-problem index of each prompt row
    sample_prefixes: int = 200
    task_seed: int = 0  # the calibration problems of an engine with static activation scales, as in training


class ProbePoint(NamedTuple):
    values: dict  # every quantity of the module docstring, by name
    prefixes: pd.DataFrame  # a seeded subsample of the per-prefix bias and bound
    vectors: dict  # {space: {"T", "Uq", "U", ...: the mean vector whose norm `values` reports}}


def probe_point(probe: Probe, student_state: dict, engine_state: dict, cfg: M.ModelConfig, teacher: M.Decoder,
                train, fixed: Rollout) -> ProbePoint:
    """Every quantity of the module docstring for one student and one engine; a seeded subsample of the
    per-prefix bias and bound (for plots). The bound is checked on every prefix (a violation raises)."""
    student = M.Decoder(cfg)
    student.load_state_dict(student_state)
    engine = Engine(cfg, probe.numerics, calibration=lambda: calibration_batch(probe.task_seed))  # as train_run's
    engine.load(engine_state)
    roll_q = sample(engine, probe.prompts, probe.probe_seed)
    roll_p = sample(trainer_engine(cfg, student_state), probe.prompts, probe.probe_seed)

    out: dict = {}
    # H_q: the engine's prefixes
    pb_q = Pullback(student, roll_q)
    logq = engine_logq(engine, roll_q)[roll_q.mask]
    logt_q = teacher_logp(teacher, roll_q)
    opd = opd_terms(pb_q.logp, logq, logt_q)
    r_q = prefix_rewards(roll_q, train.rewards(probe.idx, roll_q.responses))
    rl = reinforce_terms(pb_q.logp, logq, r_q)
    # H_p: the trainer's own prefixes
    pb_p = Pullback(student, roll_p)
    logt_p = teacher_logp(teacher, roll_p)
    opd_p = opd_terms(pb_p.logp, pb_p.logp, logt_p)
    tok_p = roll_p.responses[roll_p.mask]
    r_p = prefix_rewards(roll_p, train.rewards(probe.idx, roll_p.responses))
    a_tok = opd_p["a"].gather(1, tok_p[:, None]).squeeze(1)
    # H_f: fixed prefixes (the trainer's own at step 0), the engine's q and this student's p on them
    pb_f = Pullback(student, fixed)
    opd_f = opd_terms(pb_f.logp, engine_logq(engine, fixed)[fixed.mask], teacher_logp(teacher, fixed))

    check_bound(opd_f, "opd on the fixed prefixes")
    for name, terms in (("opd", opd), ("rl", rl)):
        check_bound(terms, name)
        pos = terms["bound"] > 0
        out[f"{name}_bias_mean"] = float(terms["g"].norm(dim=-1).mean())
        out[f"{name}_bound_mean"] = float(terms["bound"].mean())
        for norm, o in (("l2", 2), ("l1", 1)):
            ratio = torch.linalg.vector_norm(terms["g"][pos], ord=o, dim=-1) / terms["bound"][pos]
            out[f"{name}_bias_bound_max_{norm}"] = float(ratio.max()) if bool(pos.any()) else 0.0

    vectors = {  # name: (pullback, per-prefix field)
        "T": (pb_q, opd["g"]), "Uq": (pb_q, opd["u"]), "U": (pb_p, opd_p["u"]),
        "err_f": (pb_f, opd_f["g"]), "upd_f": (pb_f, opd_f["u"]),
        "T_rl": (pb_q, rl["g"]), "U_rl_sampled": (pb_p, sampled_update(pb_p.logp, tok_p, r_p)),
        "U_sampled": (pb_p, sampled_update(pb_p.logp, tok_p, a_tok)),
    }
    means = {}
    for space in ("logit", "param"):
        vec = means[space] = {k: (_mean(f) if space == "logit" else pb(f)) for k, (pb, f) in vectors.items()}
        out[f"T_{space}"] = _norm(vec["T"])
        out[f"S_{space}"] = _norm(vec["Uq"] - vec["U"])
        out[f"U_{space}"] = _norm(vec["U"])
        out[f"err_fixed_{space}"] = _norm(vec["err_f"])
        out[f"upd_fixed_{space}"] = _norm(vec["upd_f"])
        out[f"U_sampled_{space}"] = _norm(vec["U_sampled"])
        out[f"T_rl_{space}"] = _norm(vec["T_rl"])
        out[f"U_rl_sampled_{space}"] = _norm(vec["U_rl_sampled"])

    lq_tok = logq.gather(1, roll_q.responses[roll_q.mask][:, None]).squeeze(1).double()
    lp_tok = pb_q.logp.gather(1, roll_q.responses[roll_q.mask][:, None]).squeeze(1).double()
    q = logq.double().exp()
    out.update({
        "n_prefixes_q": int(roll_q.mask.sum()), "n_prefixes_p": int(roll_p.mask.sum()),
        "n_prefixes_fixed": int(fixed.mask.sum()),
        "d": float((lq_tok - lp_tok).mean()),  # the d_n formula on H_q (the teacher-forced q)
        "d_engine": float((roll_q.logprobs[roll_q.mask].double() - lp_tok).mean()),  # with the engine's own log q
        "kl_qp": float((q * (logq.double() - pb_q.logp.double())).sum(-1).mean()),  # exact KL(q || p) per prefix
        "delta_l1": float(opd["delta"].abs().sum(-1).mean()),
        "kl_pt": float((pb_p.logp.double().exp() * -opd_p["a"]).sum(-1).mean()),  # KL(p || p_T) on H_p
        "reward_q": float(r_q.mean()), "reward_p": float(r_p.mean()),
    })

    rng = np.random.default_rng([probe.probe_seed, PROBE_STREAM, 1])
    pick = np.sort(rng.choice(len(logq), min(probe.sample_prefixes, len(logq)), replace=False))
    prefixes = pd.DataFrame({"prefix": pick, "opd_bias": opd["g"].norm(dim=-1)[pick].numpy(),
                             "opd_bound": opd["bound"][pick].numpy(), "rl_bias": rl["g"].norm(dim=-1)[pick].numpy(),
                             "rl_bound": rl["bound"][pick].numpy(),
                             "delta_l1": opd["delta"].abs().sum(-1)[pick].numpy(),
                             "a_inf": opd["a"].abs().amax(-1)[pick].numpy()})
    return ProbePoint(out, prefixes, means)


# ---------------------------------------------------------------- a probed run

def versions(probe: Probes | Mapping, staleness: int) -> set[int]:
    """The policy versions a run's probes read: every probed step's, and the engine's k steps earlier."""
    return {v for s in Probes.of(probe).steps for v in (s, engine_version(s, staleness))}


def fixed_prefixes(student: M.Decoder, prompts: torch.Tensor, probe_seed: int) -> Rollout:
    return sample(trainer_engine(student.cfg, student.state_dict()), prompts, probe_seed)


class ProbeRows(NamedTuple):
    rows: list[dict]  # one per probed step and probe seed
    samples: list[pd.DataFrame]  # the probe seed's prefix samples, one per probed step


def probe_states(probe: Probes | Mapping, spec: TrainSpec | Mapping, states: dict[int, dict]) -> ProbeRows:
    """Every probed step of one run from its policy versions `states` ({version: state dict}, at least
    `versions(probe, k)`): the probe seed at every step of probe.steps, each of probe.extra_seeds (other
    prompts and draws: the probes' own sampling spread) at the first and the last step only. Returns result
    rows and the probe seed's prefix samples."""
    probe, spec = Probes.of(probe), TrainSpec.of(spec)
    row = spec.row
    k = row.staleness
    steps = sorted(probe.steps)
    missing = versions(probe, k) - set(states)
    if missing:
        raise ValueError(f"{spec.run_id}: the probes need policy versions {sorted(missing)}, which the run did not keep")
    student0 = M.load(spec.student_path)
    teacher = M.load(spec.teacher_path).eval()
    train, _ = make_task(spec.settings.task_seed)
    rows, samples = [], []
    ids = {"config": row.name, "student": spec.student, "seed": spec.seed, "noise_sigma": row.noise_sigma,
           "staleness": k}
    for ps in [probe.probe_seed, *probe.extra_seeds]:
        main = ps == probe.probe_seed
        idx = np.repeat(np.random.default_rng([ps, PROBE_STREAM]).choice(len(train), probe.prompts, replace=False),
                        probe.responses)
        point = Probe(numerics=Numerics.of_row(row, spec.seed), probe_seed=ps, prompts=train.prompts(idx),
                      idx=idx, sample_prefixes=probe.sample_prefixes, task_seed=spec.settings.task_seed)
        fixed = fixed_prefixes(student0, point.prompts, point.probe_seed)
        for s in (steps if main else sorted({steps[0], steps[-1]})):
            v = engine_version(s, k)
            out, pre, _ = probe_point(point, states[s], states[v], student0.cfg, teacher, train, fixed)
            rows.append({**ids, "step": s, "engine_version": v, "probe_seed": ps, "main": main, **out})
            if main:
                samples.append(pre.assign(**ids, step=s))
    return ProbeRows(rows, samples)


def write_run(spec: TrainSpec, states: dict[int, dict], out_dir: Path) -> float:
    """The run's probes (spec.probes) into its files `out_dir`/store.PROBE_FILES (the table, and the
    prefix sample), with the time they took (probe_s wall, probe_cpu_s CPU) on every row. Returns probe_s."""
    t0, c0 = time.perf_counter(), time.process_time()
    rows, samples = probe_states(spec.probes, spec, states)
    probe_s = time.perf_counter() - t0
    table = pd.DataFrame(rows).assign(probe_s=probe_s, probe_cpu_s=time.process_time() - c0)
    store.write_table(pd.concat(samples, ignore_index=True), Path(out_dir) / store.PROBE_FILES["prefix"])
    store.write_table(table, Path(out_dir) / store.PROBE_FILES["probes"])
    return probe_s


# ---------------------------------------------------------------- offline statistics of a candidate engine

def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    n = _norm(a) * _norm(b)
    return float((a.double() @ b.double()) / n) if n > 0 else float("nan")


def run_horizon_norm(T: torch.Tensor, horizon: int) -> float:
    """|| the mean of `horizon` steps' per-token errors ||, expected, from m >= 2 steps' errors T (rows, independent
    draws of the engine's noise direction): with T_i = mu + e_i, E ||mean of N||^2 = ||mu||^2 + tr(Sigma) / N, where
    ||mu||^2 is estimated without bias by ||mean T||^2 - tr(Sigma_hat) / m (floored at 0) and tr(Sigma_hat) is the
    sample covariance's trace (m - 1 degrees of freedom). The same vector in every row gives its norm."""
    T = T.double()
    m = T.shape[0]
    if m < 2:
        raise ValueError(f"run_horizon_norm needs at least 2 draws of the error, got {m}")
    mean = T.mean(0)
    tr = float(((T - mean) ** 2).sum(1).sum()) / (m - 1)
    mu2 = max(_norm(mean) ** 2 - tr / m, 0.0)
    return float(np.sqrt(mu2 + tr / horizon))


def step0_statistics(numerics: Numerics, student: M.Decoder, teacher: M.Decoder, probe: Probes | Mapping,
                     task_seed: int, horizon: int) -> dict:
    """Offline statistics of one engine (`numerics`) at the step-0 student, before any training: one probe point
    (probe_point, engine and trainer on the same weights) at probe.probe_seed. Besides its quantities:
      tv           mean total variation 1/2 ||q - p||_1 per prefix;
      kl_qp_rel    exact KL(q || p) per prefix over the student's KL to its teacher (kl_pt): mismatch in units of
                   the distance OPD has to close;
      coherence    ||mean_h g_bias(h)|| / mean_h ||g_bias(h)|| in logit space: 1 when every prefix's bias points
                   the same way, ~1/sqrt(#prefixes) when they cancel;
      E_*          the whole update error || mean_{H_q} u_q - mean_{H_p} u || (T and S together);
      T_U_*, S_U_*, E_U_*   T, S, E over the ideal update U;
      cos_TU_*     the cosine of the per-token error with the ideal update (negative: it opposes learning);
      T_persist_U_param   || the per-token error averaged over the first PERSIST_STEPS steps' engines || / U: T / U
                   when the engine is the same at every step, smaller when its noise direction is redrawn;
      T_run_U_param       the expected || per-token error averaged over a run's `horizon` steps || / U, estimated
                   from the first RUN_DRAWS steps' engines (run_horizon_norm): T / U for a fixed engine; for a
                   redrawn direction, the persistent part of the error plus what `horizon` steps leave of the rest."""
    probe = Probes.of(probe)
    train, _ = make_task(task_seed)
    idx = np.repeat(np.random.default_rng([probe.probe_seed, PROBE_STREAM]).choice(len(train), probe.prompts,
                                                                                 replace=False), probe.responses)
    point = Probe(numerics=numerics, probe_seed=probe.probe_seed, prompts=train.prompts(idx), idx=idx,
                  sample_prefixes=probe.sample_prefixes, task_seed=task_seed)
    state = student.state_dict()
    fixed = fixed_prefixes(student, point.prompts, point.probe_seed)
    out, _, vec = probe_point(point, state, state, student.cfg, teacher.eval(), train, fixed)
    # persistence: the per-token error averaged over the directions of the first PERSIST_STEPS steps (the same
    # vector at every step unless the noise direction is redrawn)
    redrawn = numerics.noise_redraw and numerics.noise_sigma > 0
    T_steps = [vec["param"]["T"]]
    for step in range(1, RUN_DRAWS if redrawn else 1):
        at = dataclasses.replace(numerics, noise_seed=numerics.noise_seed_at(step), noise_redraw=False)
        T_steps.append(probe_point(dataclasses.replace(point, numerics=at), state, state, student.cfg, teacher, train,
                                   fixed).vectors["param"]["T"])
    T_steps = torch.stack(T_steps)
    out["T_persist_U_param"] = _norm(T_steps[:PERSIST_STEPS].mean(0)) / out["U_param"]
    out["T_run_U_param"] = (run_horizon_norm(T_steps, horizon) if redrawn else out["T_param"]) / out["U_param"]
    out.update(tv=out["delta_l1"] / 2, kl_qp_rel=out["kl_qp"] / out["kl_pt"],
               coherence=out["T_logit"] / out["opd_bias_mean"] if out["opd_bias_mean"] > 0 else float("nan"))
    for space, v in vec.items():
        E = _norm(v["T"] + v["Uq"] - v["U"])
        out.update({f"E_{space}": E, f"T_U_{space}": out[f"T_{space}"] / out[f"U_{space}"],
                    f"S_U_{space}": out[f"S_{space}"] / out[f"U_{space}"], f"E_U_{space}": E / out[f"U_{space}"],
                    f"cos_TU_{space}": _cos(v["T"], v["U"])})
    return out
