"""Synthetic math: sums of single digits solved step by step, with a verifiable final answer.

A prompt is `<bos>3+5+9=` left-padded to a fixed width; its solution is `3+5=8,8+9=17;17<eos>`.
Difficulty tier t has t + 1 operands. Training prompts (the DAPO-Math analog) and the held-out set
(the AIME24 + MATH-500 analog) are generated from seeds and never overlap.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
VOCAB = [PAD, BOS, EOS, *"0123456789", "+", "=", ",", ";"]
STOI = {s: i for i, s in enumerate(VOCAB)}
PAD_ID, BOS_ID, EOS_ID = STOI[PAD], STOI[BOS], STOI[EOS]
MAX_OPERANDS = 5
TIERS = (1, 2, 3, 4)
PROMPT_LEN = 1 + 2 * MAX_OPERANDS  # <bos> + digits, pluses and '='
RESPONSE_LEN = 40  # longest solution: 4 steps of 'aa+b=cc,' + ';45' + <eos> = 36


def encode(text: str) -> list[int]:
    return [STOI[c] for c in text]


def decode(ids) -> str:
    out = []
    for i in ids:
        s = VOCAB[int(i)]
        if s == EOS:
            break
        if s not in (PAD, BOS):
            out.append(s)
    return "".join(out)


def solution(operands) -> str:
    total, steps = operands[0], []
    for b in operands[1:]:
        steps.append(f"{total}+{b}={total + b}")
        total += b
    return ",".join(steps) + f";{total}"


def answer_of(text: str) -> int | None:
    """The final answer of a response: the digits after the last ';', or None."""
    tail = text.rsplit(";", 1)
    if len(tail) != 2 or not tail[1].isdigit():
        return None
    return int(tail[1])


@dataclass(frozen=True)
class Problems:
    operands: tuple[tuple[int, ...], ...]

    def __len__(self):
        return len(self.operands)

    @cached_property
    def answers(self) -> np.ndarray:
        return np.array([sum(o) for o in self.operands])

    @property
    def tiers(self) -> np.ndarray:
        return np.array([len(o) - 1 for o in self.operands])

    def prompts(self, idx=None) -> torch.Tensor:
        """(n, PROMPT_LEN) token ids, left-padded."""
        ops = self.operands if idx is None else [self.operands[i] for i in idx]
        rows = []
        for o in ops:
            ids = [BOS_ID] + encode("+".join(map(str, o)) + "=")
            rows.append([PAD_ID] * (PROMPT_LEN - len(ids)) + ids)
        return torch.tensor(rows, dtype=torch.long)

    def solutions(self, idx=None) -> torch.Tensor:
        """(n, RESPONSE_LEN) reference responses, <eos> then padding."""
        ops = self.operands if idx is None else [self.operands[i] for i in idx]
        rows = []
        for o in ops:
            ids = encode(solution(o)) + [EOS_ID]
            rows.append(ids + [PAD_ID] * (RESPONSE_LEN - len(ids)))
        return torch.tensor(rows, dtype=torch.long)

    def rewards(self, idx, responses: torch.Tensor) -> np.ndarray:
        """1.0 where a response's final answer is right."""
        ans = self.answers[np.asarray(idx)]
        got = [answer_of(decode(r)) for r in responses.tolist()]
        return np.array([float(g is not None and g == a) for g, a in zip(got, ans)])


def _draw(rng: np.random.Generator, n_per_tier: int) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in rng.integers(0, 10, size=t + 1)) for t in TIERS for _ in range(n_per_tier)]


def make_task(seed: int = 0, n_train_per_tier: int = 5000, n_heldout_per_tier: int = 100):
    """(train, heldout) problem sets; held-out problems are removed from the training pool."""
    heldout = list(dict.fromkeys(_draw(np.random.default_rng([seed, 1]), n_heldout_per_tier)))
    held = set(heldout)
    train = [o for o in _draw(np.random.default_rng([seed, 0]), n_train_per_tier) if o not in held]
    return Problems(tuple(train)), Problems(tuple(heldout))


def calibration_problems(seed: int = 0, n: int = 128) -> Problems:
    """Problems for calibrating static activation scales (Model Optimizer's recipe calibrates once on a
    separate dataset): drawn from the two longest tiers, none in task `seed`'s training or held-out set."""
    train, heldout = make_task(seed)
    seen = set(train.operands) | set(heldout.operands)
    rng = np.random.default_rng([seed, 2])
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        o = tuple(int(v) for v in rng.integers(0, 10, size=TIERS[-2 + len(out) % 2] + 1))
        if o not in seen and o not in out:
            out.append(o)
    return Problems(tuple(out))


def calibration_batch(seed: int = 0, n: int = 128) -> torch.Tensor:
    """Calibration sequences (n, PROMPT_LEN + RESPONSE_LEN): calibration_problems' prompts and solutions."""
    p = calibration_problems(seed, n)
    return torch.cat([p.prompts(), p.solutions()], dim=1)


def save_hf_tokenizer(path: Path) -> None:
    """Write the character-level vocabulary as a Hugging Face fast tokenizer (tokenizer.json + config).

    The chat template builds exactly the tiny prompt: the problem after <bos>, left-padded with literal
    <pad> tokens to the fixed width the models were trained on (they attend to those pads, and positions
    start at the first pad). So that tools which strip left padding by the tokenizer's pad id (verl
    before vLLM) leave those tokens alone, the tokenizer's own padding token is <eos>, not <pad>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=STOI, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.add_special_tokens([PAD, BOS, EOS])  # one token each, never split into characters
    tok.decoder = decoders.Fuse()  # characters back to text without separators, as `decode` does
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    width = PROMPT_LEN - 1
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
        "pad_token": EOS, "unk_token": PAD, "model_max_length": PROMPT_LEN + RESPONSE_LEN,
        "chat_template": "{% set p = messages | map(attribute='content') | join('') %}"
                         f"{{{{ '{PAD}' * ({width} - p | length) }}}}{{{{ bos_token }}}}{{{{ p }}}}"}, indent=1))
