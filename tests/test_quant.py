"""The engine numerics of opd/quant.py, against torch's own float8 casts and the formats' definitions."""
import pytest
import torch
import yaml

from opd import config as C
from opd import quant

E4M3 = torch.float8_e4m3fn


def test_cast_fp8_is_torch_float8_cast_in_range_and_saturates_outside():
    x = torch.randn(4096) * 100
    inside = x.clamp(-448, 448)
    assert torch.equal(quant.cast_fp8(inside), inside.to(E4M3).to(torch.float32))
    assert quant.cast_fp8(torch.tensor([1e4, -1e4])).tolist() == [448.0, -448.0]
    y = torch.randn(4096) * 1e4
    assert torch.equal(quant.cast_fp8(y.clamp(-57344, 57344), "e5m2"),
                       y.clamp(-57344, 57344).to(torch.float8_e5m2).to(torch.float32))


def test_fp8_per_tensor_is_bit_equal_to_a_scaled_float8_cast():
    w = torch.randn(96, 64)
    scale = w.abs().max() / 448
    assert torch.equal(quant.fp8_per_tensor(w), (w / scale).to(E4M3).to(torch.float32) * scale)


def test_fp8_block_has_one_scale_per_128_tile():
    torch.manual_seed(0)
    w = torch.randn(200, 300)
    w[:128, :128] *= 1e5  # one tile with a far larger range than the others
    q = quant.fp8_block(w)
    for r0 in range(0, 200, 128):
        for c0 in range(0, 300, 128):
            tile, qt = w[r0:r0 + 128, c0:c0 + 128], q[r0:r0 + 128, c0:c0 + 128]
            scale = tile.abs().max() / 448
            assert torch.equal(qt, (tile / scale).to(E4M3).to(torch.float32) * scale)
    # small tiles keep their precision; one per-tensor scale flushes much of them to zero
    small = w[128:, 128:]
    assert ((q[128:, 128:] - small).abs() / small.abs()).median() < 0.05
    assert (quant.fp8_per_tensor(w)[128:, 128:] == 0).float().mean() > 0.1


def test_e2m1_rounding_ties_to_even():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, -0.75, 0.2, 2.6])
    assert quant.round_e2m1(x).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, -1.0, 0.0, 3.0]


def test_nvfp4_values_lie_on_the_e2m1_grid_times_e4m3_block_scales():
    w = torch.randn(64, 80) * torch.logspace(-2, 1, 80)  # columns of very different magnitude
    q = quant.nvfp4(w)
    g = w.abs().max() / (448 * 6)
    blocks_w, blocks_q = w.reshape(64, 5, 16), q.reshape(64, 5, 16)
    block_scale = (blocks_w.abs().amax(-1, keepdim=True) / 6 / g).to(E4M3).to(torch.float32) * g
    codes = blocks_q / block_scale
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    assert torch.isclose(codes.abs().unsqueeze(-1), grid, rtol=1e-5, atol=1e-6).any(-1).all()
    assert (codes.abs() <= 6 + 1e-5).all()
    # each value is the nearest grid point to the scaled input
    assert torch.allclose(codes, quant.round_e2m1(blocks_w / block_scale), atol=1e-5)


def test_gaussian_noise_is_fixed_direction_and_relative_to_rms():
    w = torch.randn(256, 256) * 3
    a = quant.gaussian_noise(w, 0.1, "layers.0.q_proj.weight", seed=1)
    b = quant.gaussian_noise(w, 0.1, "layers.0.q_proj.weight", seed=1)
    c = quant.gaussian_noise(w, 0.1, "layers.1.q_proj.weight", seed=1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    rel = (a - w).pow(2).mean().sqrt() / w.pow(2).mean().sqrt()
    assert abs(rel.item() - 0.1) < 0.005


def test_engine_weights_skip_layers_kept_bf16_and_non_projection_tensors():
    state = {"model.layers.0.self_attn.q_proj.weight": torch.randn(64, 64),
             "model.layers.1.self_attn.q_proj.weight": torch.randn(64, 64),
             "model.layers.1.input_layernorm.weight": torch.randn(64),
             "model.embed_tokens.weight": torch.randn(10, 64)}
    out = quant.engine_weights(state, weights="fp8_tensor", bf16_layers=[0], n_layers=2)
    assert torch.equal(out["model.layers.0.self_attn.q_proj.weight"], state["model.layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(out["model.layers.1.self_attn.q_proj.weight"], state["model.layers.1.self_attn.q_proj.weight"])
    assert torch.equal(out["model.layers.1.input_layernorm.weight"], state["model.layers.1.input_layernorm.weight"])
    assert torch.equal(out["model.embed_tokens.weight"], state["model.embed_tokens.weight"])
    last = quant.engine_weights(state, weights="nvfp4", bf16_layers=[-1], n_layers=2)
    assert torch.equal(last["model.layers.1.self_attn.q_proj.weight"], state["model.layers.1.self_attn.q_proj.weight"])


def test_the_schema_names_exactly_the_registered_recipes():
    """Adding a recipe is its registry entry (and its test): the config schema offers what opd.quant registers."""
    rows = yaml.safe_load(C.SCHEMA.read_text())["$defs"]["row"]["properties"]
    for kind in ("weights", "activations", "kv_cache"):
        assert set(rows[kind]["enum"]) == set(quant.RECIPES[kind]), kind
    assert all(quant.recipe_function(r) is not None for n, r in quant.RECIPES["weights"].items() if n != "none")
    assert all(r.fmt in quant.FP8_FORMATS for n, r in quant.RECIPES["kv_cache"].items() if n != "none")
    with pytest.raises(ValueError, match="unknown weights recipe 'int3'"):
        quant.quantize_weight(torch.ones(2, 2), "int3")


def test_fp8_per_token_scales_each_token_by_its_own_amax():
    x = torch.randn(6, 40) * torch.logspace(-3, 2, 6)[:, None]  # tokens of very different magnitude
    q = quant.fp8_per_token(x)
    for row, qrow in zip(x, q):
        s = row.abs().max() / 448
        assert torch.equal(qrow, (row / s).to(E4M3).to(torch.float32) * s)


def test_fp8_per_token_group_scales_each_128_element_group_of_each_token_by_its_own_amax():
    x = torch.randn(3, 300) * torch.logspace(-2, 2, 300)  # a width that is not a multiple of 128
    q = quant.fp8_per_token_group(x)
    for row, qrow in zip(x, q):
        for a in range(0, 300, 128):
            g = row[a:a + 128]
            s = g.abs().max() / 448
            assert torch.equal(qrow[a:a + 128], (g / s).to(E4M3).to(torch.float32) * s)
    small = torch.randn(4, 64)  # at most one group: per-token scales
    assert torch.equal(quant.fp8_per_token_group(small), quant.fp8_per_token(small))


def test_fp8_static_uses_the_calibrated_amax_and_saturates_beyond_it():
    x = torch.linspace(-3, 3, 101)
    q = quant.fp8_static(x, torch.tensor(2.0))
    s = 2.0 / 448
    inside = x.abs() <= 2
    assert torch.equal(q[inside], (x[inside] / s).to(E4M3).to(torch.float32) * s)
    assert torch.allclose(q[~inside].abs(), torch.tensor(2.0))  # clipped at the calibrated range


def test_activation_recipes_quantize_the_linear_inputs_of_layers_not_kept_bf16():
    from opd.backends.tiny.engine import Engine, Numerics
    from opd.backends.tiny.model import Decoder, ModelConfig

    cfg = ModelConfig(vocab_size=18, n_layers=2, d_ff=64)
    torch.manual_seed(0)
    state = Decoder(cfg).state_dict()
    ids = torch.randint(3, 18, (4, 12))
    calib = lambda: torch.randint(3, 18, (8, 12))  # noqa: E731

    def logits(**numerics):
        e = Engine(cfg, Numerics(**numerics), calibration=calib)
        e.load(state)
        with torch.no_grad():
            return e, e.model(ids)

    _, plain = logits()
    for act in ("fp8_token", "nvfp4", "fp8_static"):
        _, all_layers = logits(activations=act)
        _, kept = logits(activations=act, bf16_layers=(0, 1))
        assert torch.equal(kept, plain), act  # every layer kept BF16: nothing quantized
        assert not torch.equal(all_layers, plain), act
    e, _ = logits(activations="fp8_static", bf16_layers=(0,))
    assert e.activations.amax and all(".layers.1." in n for n in e.activations.amax)  # layer 1's linears only
    before = dict(e.activations.amax)
    e.load({k: 2 * v for k, v in state.items()}, version=1)  # a later weight sync keeps the static scales
    assert all(torch.equal(before[n], e.activations.amax[n]) for n in before)


@pytest.mark.parametrize("n_layers", [2, 3])
def test_kv_attribution_has_keys_only_and_values_only_cases_for_every_layer(n_layers):
    cases = quant.kv_attribution_cases(n_layers)
    for layer in range(n_layers):
        only = {part: keep for mode, i, keep, part in cases if mode == "only" and i == layer}
        assert set(only) == {"kv", "k", "v"}  # the three parts quantize the same single layer
        assert all(set(keep) == set(range(n_layers)) - {layer} for keep in only.values())
    assert {p for m, _, _, p in cases if m == "all"} == {"kv", "k", "v"}
    assert {p for m, _, _, p in cases if m == "all_but"} == {"kv"}
    assert len(cases) == 3 + 3 * n_layers + n_layers
    # vLLM stores keys and values alike: the verl job asks for keys and values only
    assert {p for *_, p in quant.kv_attribution_cases(n_layers, parts=("kv",))} == {"kv"}
    with pytest.raises(ValueError, match="unknown KV-cache part"):
        quant.kv_attribution_cases(n_layers, parts=("q",))


def test_interpolate_takes_a_fraction_of_the_quantization_and_alpha_1_is_the_recipe_itself():
    x = torch.randn(64, 64)
    q = quant.nvfp4(x)
    assert quant.interpolate(x, q, 1.0) is q and quant.interpolate(x, q, 1) is q
    assert torch.allclose(quant.interpolate(x, q, 0.25), x + 0.25 * (q - x))
    bf = x.to(torch.bfloat16)
    assert torch.equal(quant.interpolate(bf, q.to(torch.bfloat16), 1e-9), bf)  # towards 0: the unquantized value
    state = {"model.layers.0.self_attn.q_proj.weight": x, "model.layers.0.input_layernorm.weight": torch.randn(64)}
    full = quant.engine_weights(state, weights="nvfp4", n_layers=1)
    assert all(torch.equal(full[k], v) for k, v in quant.engine_weights(state, weights="nvfp4", n_layers=1,
                                                                        quant_alpha=1.0).items())
    half = quant.engine_weights(state, weights="nvfp4", n_layers=1, quant_alpha=0.5)
    w = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(half[w], (x + full[w]) / 2) and not torch.equal(half[w], full[w])
    assert torch.equal(half["model.layers.0.input_layernorm.weight"], state["model.layers.0.input_layernorm.weight"])


def test_interpolate_above_1_amplifies_the_recipes_own_error():
    """alpha > 1: the quantization error q - x itself, the same entries and signs, alpha times larger (past q)."""
    x = torch.randn(64, 64)
    q = quant.nvfp4(x)
    two = quant.interpolate(x, q, 2.0)
    assert two.dtype == x.dtype and torch.allclose(two, x + 2 * (q - x)) and torch.allclose(two - x, 2 * (q - x))
    moved = q != x
    assert moved.any() and torch.equal(torch.sign(two - x)[moved], torch.sign(q - x)[moved])
    assert torch.equal(two[~moved], x[~moved])  # an entry the recipe leaves exact stays exact
    assert torch.allclose(quant.interpolate(x, q, 16.0), x + 16 * (q - x))
    bf = x.to(torch.bfloat16)  # in BF16: computed in FP32, cast once
    assert torch.equal(quant.interpolate(bf, q.to(torch.bfloat16), 2.0),
                       (bf.float() + 2 * (q.to(torch.bfloat16).float() - bf.float())).to(torch.bfloat16))
    state = {"model.layers.0.self_attn.q_proj.weight": x}
    w = "model.layers.0.self_attn.q_proj.weight"
    full = quant.engine_weights(state, weights="nvfp4", n_layers=1)
    double = quant.engine_weights(state, weights="nvfp4", n_layers=1, quant_alpha=2.0)
    assert torch.allclose(double[w], 2 * full[w] - x)


# ---------------------------------------------------------------- quant_alpha in the tiny engine

ALPHA_ENGINE = {"weights": "nvfp4", "activations": "nvfp4", "kv_cache": "fp8_e5m2"}


@pytest.fixture(scope="module")
def tiny_model():
    """A random 2-layer student of the task's vocabulary with sharpened weights (so that the engines' log-probs
    differ measurably), and a fixed batch sampled by the standard BF16 engine."""
    import numpy as np
    from opd.backends.tiny.engine import Engine, Numerics, step_generator
    from opd.backends.tiny.model import Decoder
    from opd.backends.tiny.sft import model_config
    from opd.backends.tiny.task import make_task

    cfg = model_config({"family": "qwen2", "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 32, "d_ff": 64,
                        "student_steps": 1, "teacher_steps": 2, "seed": 0})
    torch.manual_seed(0)
    model = Decoder(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3)
    train, _ = make_task(0)
    bf16 = Engine(cfg, Numerics())
    bf16.load(model.state_dict())
    roll = bf16.generate(train.prompts(np.arange(16)), step_generator(0, 1))
    return cfg, model, roll, train


def _engine(cfg, model, **numerics):
    from opd.backends.tiny.engine import Engine, Numerics
    from opd.backends.tiny.task import calibration_batch
    e = Engine(cfg, Numerics(**numerics), calibration=lambda: calibration_batch(0))
    e.load(model.state_dict())
    return e


def test_quant_alpha_1_is_the_quantized_engine_bit_for_bit(tiny_model):
    """A row that writes quant_alpha: 1 runs today's engine: the same weights, the same cache (FP8 storage), the same
    log-probs on a fixed batch and the same samples."""
    from opd.backends.tiny.engine import KVCache, Numerics, step_generator
    from opd.backends.tiny.probes import engine_logq
    from opd.rows import Row
    cfg, model, roll, train = tiny_model
    row = {"name": "q", **ALPHA_ENGINE}
    plain, one = Numerics.of_row(Row.of(row)), Numerics.of_row(Row.of({**row, "quant_alpha": 1.0}))
    assert plain == one and plain.quant_alpha == 1.0
    a, b = _engine(cfg, model, **ALPHA_ENGINE), _engine(cfg, model, **ALPHA_ENGINE, quant_alpha=1.0)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert torch.equal(engine_logq(a, roll), engine_logq(b, roll))
    ra, rb = (e.generate(train.prompts(range(8)), step_generator(0, 2)) for e in (a, b))
    assert torch.equal(ra.responses, rb.responses) and torch.equal(ra.logprobs, rb.logprobs)
    assert KVCache(cfg, 1, 4, one).k[0].dtype == torch.float8_e5m2
    assert KVCache(cfg, 1, 4, Numerics(**ALPHA_ENGINE, quant_alpha=0.5)).k[0].dtype == torch.bfloat16  # emulated
    assert KVCache.bytes_per_sequence(cfg, 8, Numerics(**ALPHA_ENGINE, quant_alpha=0.5)) == \
        KVCache.bytes_per_sequence(cfg, 8, Numerics())


def test_an_amplified_kv_cache_is_stored_in_bf16_with_its_fp8_error_scaled(tiny_model):
    """quant_alpha > 1 on the KV cache: FP8 cannot hold x + alpha (FP8(x) - x), so each quantized layer stores it in
    the engine dtype (as below 1: no memory saved), each key and value its FP8 rounding error times alpha."""
    from opd.backends.tiny.engine import KVCache, Numerics
    from opd.quant import FP8_FORMATS
    cfg, *_ = tiny_model
    n = Numerics(kv_cache="fp8_e5m2", quant_alpha=2.0)
    cache = KVCache(cfg, 1, 4, n)
    assert all(t.dtype == torch.bfloat16 for t in cache.k + cache.v)
    assert KVCache.bytes_per_sequence(cfg, 8, n) == KVCache.bytes_per_sequence(cfg, 8, Numerics())
    k = torch.randn(1, cfg.n_kv_heads, 2, cfg.head_dim, dtype=torch.bfloat16)
    got, _ = cache.append(0, k, k)
    assert cache.fmt_k[0] == "e5m2"
    fp8 = k.to(FP8_FORMATS["e5m2"]).to(torch.bfloat16).float()
    assert torch.equal(got, (k.float() + 2 * (fp8 - k.float())).to(torch.bfloat16))


@pytest.mark.parametrize("numerics", [{"weights": "nvfp4"}, {"activations": "nvfp4"}, {"kv_cache": "fp8_e5m2"},
                                      {"activations": "fp8_static"}, ALPHA_ENGINE])
def test_quant_alpha_moves_each_mechanism_from_bf16_towards_the_recipe(tiny_model, numerics):
    """On a fixed batch, the engine's log-probs at quant_alpha < 1 lie between the BF16 engine's and the recipe's:
    their distance from BF16's grows with alpha, is near 0 at a small alpha, and grows on past the recipe (alpha 2)."""
    from opd.backends.tiny.probes import engine_logq
    cfg, model, roll, _ = tiny_model
    ref = engine_logq(_engine(cfg, model), roll)

    def dist(alpha):
        return float((engine_logq(_engine(cfg, model, **numerics, quant_alpha=alpha), roll) - ref).abs()[roll.mask].mean())
    d = [dist(a) for a in (1e-3, 0.25, 0.5, 1.0, 2.0)]
    assert d[0] < 0.2 * d[1] and d[1] < d[2] < d[3] < d[4], d  # and past the recipe at 2: its error amplified


def test_quant_alpha_lowers_the_in_training_mismatch(tiny_model):
    """d_n (the engine's own samples against the fp32 trainer on a fixed batch of prompts and draws) at alpha 0.25
    is below the full recipes' and above the BF16 engine's."""
    import numpy as np
    from opd.backends.tiny.engine import step_generator, token_logprobs
    from opd.backends.tiny.trainer import mismatch
    cfg, model, _, train = tiny_model
    prompts = train.prompts(np.repeat(np.arange(32), 4))

    def d_n(**numerics):
        roll = _engine(cfg, model, **numerics).generate(prompts, step_generator(0, 1))
        with torch.no_grad():
            return mismatch(roll.logprobs, token_logprobs(model, roll)[0], roll.mask)[0]
    bf16, quarter, full = d_n(), d_n(**ALPHA_ENGINE, quant_alpha=0.25), d_n(**ALPHA_ENGINE)
    assert abs(bf16) < quarter < 0.5 * full, (bf16, quarter, full)
