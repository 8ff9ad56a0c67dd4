"""A roofline bound that holds before optimization (hloflops.report.roofline_basis).

On every pair of the same program before and after XLA's optimizations (the bundled examples,
and optax train steps of an MLP, a small conv net and a small transformer written with Flax),
on every built-in chip, the bound read off the module before optimization never exceeds the
bound of the optimized module. The optimized module's bound is the per-instruction sum as
before; the summary and the JSON say which basis was used and the rate each dtype was priced at.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hloflops import analyze
from hloflops.report.chips import CHIPS, find_chip
from hloflops.report.roofline import unit_times
from hloflops.report.roofline_basis import OPTIMIZED, UNOPTIMIZED, mandatory_work, optimization_stage

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name.split(".")[0] for p in (ROOT / "examples").glob("*.before_optimizations.hlo"))


def _assert_bound_holds(before, after) -> None:
    assert before.roofline(CHIPS[0]).basis == UNOPTIMIZED and after.roofline(CHIPS[0]).basis == OPTIMIZED
    for chip in CHIPS:
        low, high = before.roofline(chip).lower_bound_s, after.roofline(chip).lower_bound_s
        assert 0 <= low <= high, (chip.name, low, high)


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_before_optimization_bound_the_optimized(name: str) -> None:
    assert len(EXAMPLES) >= 7
    before = analyze(ROOT / "examples" / f"{name}.before_optimizations.hlo")
    after = analyze(ROOT / "examples" / f"{name}.after_optimizations.hlo")
    _assert_bound_holds(before, after)


def test_the_optimized_bound_is_the_per_instruction_sum() -> None:
    report = analyze(ROOT / "examples" / "seed000_listed.after_optimizations.hlo")
    chip = find_chip("h100")
    result = report.roofline(chip)
    assert result.lower_bound_s == pytest.approx(sum(u.seconds for u in unit_times(report, chip, report.module)),
                                                 rel=1e-12)
    assert result.priced_at == {"f32 dot/convolution": "tf32 494.5 TFLOP/s", "f32 other ops": "f32 67 TFLOP/s",
                                "s32 other ops": "f32 67 TFLOP/s"}
    text = report.summary(chip="h100")
    assert "basis: optimized (the file name says after_optimizations)" in text
    assert "priced at: f32 dot/convolution at tf32 494.5 TFLOP/s; f32, s32 other ops at f32 67 TFLOP/s" in text
    d = report.to_dict(chip="h100")["roofline"]
    assert d["basis"] == "optimized" and d["priced_at"]["f32 dot/convolution"] == "tf32 494.5 TFLOP/s"


DOTS = """HloModule m
ENTRY e {
  a = f32[64,32]{1,0} parameter(0), metadata={op_name="jit(f)/a"}
  b = f32[32,16]{1,0} parameter(1)
  unused = f32[100,100]{1,0} parameter(2)
  d1 = f32[64,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[64,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dead = f32[64,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  z = f32[] constant(0)
  c = f32[16,8]{1,0} broadcast(z), dimensions={}
  folded = f32[64,8]{1,0} dot(d1, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[64,16]{1,0} add(d1, d2)
  ROOT t = (f32[64,16]{1,0}, f32[64,8]{1,0}, f32[100,100]{1,0}) tuple(s, folded, unused)
}
"""


def test_mandatory_work_by_hand() -> None:
    from hloparse import parse

    module = parse(DOTS)
    assert optimization_stage(module) == (True, "not scheduled, nothing fused, traced by a frontend (op_name metadata)")
    work = mandatory_work(module)
    # d1 and d2 are one value (CSE); `dead` reaches no output; `folded` has a constant side.
    assert [d.name for d in work.dots] == ["d1"] and work.dots[0].flops == 64 * 16 * (2 * 32 - 1)
    # a and b are read whole by the dot; `unused` is only passed through. Outputs: s and folded.
    assert work.parameter_bytes == 4 * (64 * 32 + 32 * 16)
    assert work.output_bytes == 4 * (64 * 16 + 64 * 8)


def test_hand_written_modules_keep_the_bound_as_written() -> None:
    from hloparse import parse

    plain = parse("HloModule m\nENTRY e {\n  a = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(a)\n}\n")
    assert optimization_stage(plain)[0] is False


# ---- train steps of the test catalogue's kinds ----------------------------------------------

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")
optax = pytest.importorskip("optax")


class _MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for width in (32, 32):
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(4)(x)


class _ConvNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.relu(nn.Conv(8, (3, 3), strides=(2, 2))(x))
        return nn.Dense(4)(x.reshape((x.shape[0], -1)))


class _Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16)(h, h)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(16)(nn.gelu(nn.Dense(32)(h)))


class _Transformer(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(50, 16)(tokens)
        for _ in range(2):
            x = _Block()(x)
        return nn.Dense(50)(nn.LayerNorm()(x))


def _train_step(model: nn.Module, x, y):
    import jax.numpy as jnp

    params = model.init(jax.random.PRNGKey(0), x)
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)

    def step(params, opt_state, x, y):
        def loss(p):
            out = model.apply(p, x)
            if y.dtype == jnp.int32:
                return optax.softmax_cross_entropy_with_integer_labels(out, y).mean()
            return ((out - y) ** 2).mean()
        grads = jax.grad(loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return step, (params, opt_state, x, y)


def _train_programs():
    from tests.programs import Program

    rng = np.random.default_rng(0)
    mlp = _train_step(_MLP(), rng.normal(size=(8, 16)).astype(np.float32), rng.normal(size=(8, 4)).astype(np.float32))
    conv = _train_step(_ConvNet(), rng.normal(size=(2, 8, 8, 3)).astype(np.float32),
                       rng.normal(size=(2, 4)).astype(np.float32))
    tokens = rng.integers(0, 50, size=(2, 8)).astype(np.int32)
    lm = _train_step(_Transformer(), tokens, tokens)
    return {name: Program(f"roofline_basis_train_{name}", fn, args)
            for name, (fn, args) in (("mlp", mlp), ("conv", conv), ("transformer", lm))}


@pytest.mark.parametrize("name", ["mlp", "conv", "transformer"])
def test_train_steps_before_optimization_bound_the_optimized(name: str) -> None:
    from tests.programs.compile import compile_program

    compiled, lowered, _ = compile_program(_train_programs()[name])
    before, after = analyze(lowered), analyze(compiled)
    _assert_bound_holds(before, after)
    # The old per-instruction sum of the unoptimized module was no bound: it exceeds the optimized one.
    chip = find_chip("h100")
    old = sum(u.seconds for u in unit_times(before, chip, before.module))
    assert old > after.roofline(chip).lower_bound_s
    work = mandatory_work(before.module)
    assert work.dots and work.parameter_bytes > 0  # the bound is not vacuous
    d = before.to_dict(chip="h100")["roofline"]
    assert d["basis"] == "unoptimized: parameters+outputs" and d["by_bound"]["network"] == 0.0
