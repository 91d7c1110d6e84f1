"""Training and held-out data in verl's parquet format (columns: data_source, prompt as chat messages,
ability, reward_model {style, ground_truth}, extra_info {index, split}), from local files: a parquet or
JSONL export of DAPO-Math-17k, AIME24 and MATH-500, or a local datasets cache. No downloads.

`toy_task` writes the tiny backend's synthetic task in the same format (data_source `opd-toy`), so the
verl backend's jobs can run on the toy models (benchmarks/verl_smoke.py, the real-vLLM tests), and
`score` grades a response by its data source: `\boxed{}` for math, the toy task's `;answer` for opd-toy."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opd import store

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
PROMPT_KEYS = ("prompt", "problem", "question")
ANSWER_KEYS = ("answer", "reward_model", "solution", "ground_truth")


def _read(path: Path) -> pd.DataFrame:
    path = Path(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return pd.read_json(path, lines=path.suffix == ".jsonl")
    raise ValueError(f"{path}: expected .parquet, .jsonl or .json")


def _pick(df: pd.DataFrame, keys, path, what) -> pd.Series:
    for k in keys:
        if k in df.columns:
            return df[k]
    raise ValueError(f"{path}: no {what} column (looked for {', '.join(keys)})")


def _text(p) -> str:
    """A prompt given as text, or as chat messages (DAPO-Math's format): the user's content."""
    if isinstance(p, str):
        return p
    msgs = list(p)
    return next(m["content"] for m in msgs if m.get("role") == "user")


def to_verl(src: Path, data_source: str, split: str, set_name: str | None = None) -> pd.DataFrame:
    df = _read(src)
    prompts = _pick(df, PROMPT_KEYS, src, "prompt").map(_text)
    answers = _pick(df, ANSWER_KEYS, src, "answer").map(lambda a: str(a["ground_truth"]) if isinstance(a, dict) else str(a))
    return pd.DataFrame({
        "data_source": data_source,
        "prompt": [[{"role": "user", "content": f"{p}\n{INSTRUCTION}"}] for p in prompts],
        "ability": "math",
        "reward_model": [{"style": "rule", "ground_truth": a} for a in answers],
        "extra_info": [{"index": i, "split": split, "set": set_name or data_source} for i in range(len(df))],
        "opd_teacher_key": "math",
    })


# A set's data_source selects verl's scorer (verl.utils.reward_score.default_compute_score): the names
# below are the ones it knows for these sets (DAPO-Math-17k's own data_source is math_dapo).
TRAIN_SOURCE = "math_dapo"
HELDOUT_SOURCES = {"aime24": "aime24", "aime25": "aime25", "math500": "HuggingFaceH4/MATH-500"}


def prepare(train_src: Path, heldout_srcs: dict[str, Path], out_dir: Path) -> dict[str, Path]:
    """Write train.parquet and heldout.parquet (held-out sets concatenated in the order given, prompt ids
    in order; extra_info.set names each problem's set)."""
    unknown = set(heldout_srcs) - set(HELDOUT_SOURCES)
    if unknown:
        raise ValueError(f"held-out set(s) {sorted(unknown)}: verl's reward has no scorer chosen for them; "
                         f"known: {sorted(HELDOUT_SOURCES)}")
    out_dir = Path(out_dir)
    train = to_verl(train_src, TRAIN_SOURCE, "train")
    held = pd.concat([to_verl(p, HELDOUT_SOURCES[name], "test", name) for name, p in heldout_srcs.items()],
                     ignore_index=True)
    held["extra_info"] = [{**e, "prompt_id": i} for i, e in enumerate(held["extra_info"])]
    paths = {"train": out_dir / "train.parquet", "heldout": out_dir / "heldout.parquet"}
    store.write_table(train, paths["train"])
    store.write_table(held, paths["heldout"])
    return paths


TOY_SOURCE = "opd-toy"


def toy_task(out_dir: Path, n_train: int = 512, n_heldout: int = 64, seed: int = 0) -> dict[str, Path]:
    """The tiny backend's task as verl parquet: `n_train` training and `n_heldout` held-out problems of
    make_task(seed), evenly spaced over each set. The chat prompt is the bare problem, which the exported
    toy tokenizer's chat template turns into the tiny prompt."""
    from opd.backends.tiny.task import make_task

    def frame(problems, count, split):  # evenly spaced, so every difficulty tier is represented
        ops = [problems.operands[i] for i in np.linspace(0, len(problems) - 1, min(count, len(problems))).astype(int)]
        return pd.DataFrame({
            "data_source": TOY_SOURCE, "ability": "math", "opd_teacher_key": "math",
            "prompt": [[{"role": "user", "content": "+".join(map(str, o)) + "="}] for o in ops],
            "reward_model": [{"style": "rule", "ground_truth": str(sum(o))} for o in ops],
            "extra_info": [{"index": i, "split": split, "prompt_id": i} for i in range(len(ops))]})
    train, held = make_task(seed)
    paths = {"train": Path(out_dir) / "train.parquet", "heldout": Path(out_dir) / "heldout.parquet"}
    store.write_table(frame(train, n_train, "train"), paths["train"])
    store.write_table(frame(held, n_heldout, "test"), paths["heldout"])
    return paths


def boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} in a response (braces balanced), or None."""
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, j = 0, i + len("\\boxed{")
    for k in range(j, len(text)):
        depth += text[k] == "{"
        if text[k] == "}":
            if depth == 0:
                return text[j:k].strip()
            depth -= 1
    return None


def score(data_source: str, text: str, ground_truth: str) -> float:
    """1.0 if a response's final answer is right, else 0.0: the toy task's own check for opd-toy, verl's
    scorer for its data sources where verl is installed (the cluster), else an exact match of the last
    \\boxed{} (a machine without verl)."""
    if data_source == TOY_SOURCE:
        from opd.backends.tiny.task import answer_of
        got = answer_of(text)
        return float(got is not None and str(got) == str(ground_truth).strip())
    try:
        from verl.utils.reward_score import default_compute_score
    except ImportError:
        return float(boxed(text) == str(ground_truth).strip())
    res = default_compute_score(data_source, text, ground_truth)
    return float(res["acc"]) if isinstance(res, dict) else float(res > 0)
