"""Training and held-out data in verl's parquet format (columns: data_source, prompt as chat messages,
ability, reward_model {style, ground_truth}, extra_info {index, split}), from local files: a parquet or
JSONL export of DAPO-Math-17k, AIME24 and MATH-500, or a local datasets cache. No downloads."""
from __future__ import annotations

from pathlib import Path

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


def to_verl(src: Path, data_source: str, split: str) -> pd.DataFrame:
    df = _read(src)
    prompts = _pick(df, PROMPT_KEYS, src, "prompt").map(_text)
    answers = _pick(df, ANSWER_KEYS, src, "answer").map(lambda a: str(a["ground_truth"]) if isinstance(a, dict) else str(a))
    return pd.DataFrame({
        "data_source": data_source,
        "prompt": [[{"role": "user", "content": f"{p}\n{INSTRUCTION}"}] for p in prompts],
        "ability": "math",
        "reward_model": [{"style": "rule", "ground_truth": a} for a in answers],
        "extra_info": [{"index": i, "split": split} for i in range(len(df))],
        "opd_teacher_key": "math",
    })


def prepare(train_src: Path, heldout_srcs: dict[str, Path], out_dir: Path) -> dict[str, Path]:
    """Write train.parquet and heldout.parquet (held-out sets concatenated, prompt ids in order)."""
    out_dir = Path(out_dir)
    train = to_verl(train_src, "dapo-math-17k", "train")
    held = pd.concat([to_verl(p, name, "test") for name, p in heldout_srcs.items()], ignore_index=True)
    held["extra_info"] = [{**e, "prompt_id": i} for i, e in enumerate(held["extra_info"])]
    paths = {"train": out_dir / "train.parquet", "heldout": out_dir / "heldout.parquet"}
    store.write_table(train, paths["train"])
    store.write_table(held, paths["heldout"])
    return paths
