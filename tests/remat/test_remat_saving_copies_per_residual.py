"""How many copies of a recomputed value the program without remat's saving fusions make, counted
from the residuals on whose chain the value is (analysis/hloflops/remat/backward_loop_copies.py
`_saving_copies`), in a TPU scan's backward loop.

A layer norm's `scale * rsqrt(var)` (`[b, t, d]`, a product of two broadcasts) is a residual
itself and on the chain of the layer norm's output, which the weights' gradients read. The program
without remat stacks it through a `[1, b, t, d]` broadcast that XLA's simplifier moves into the
product's operands: an op of its own beside the chain's copy in the saving fusion, two copies
where the rule had allowed one (TPU draw 1, hk.layer_stack attention: multiply +1,048,576 after
optimization, one `[4, 128, 512]` product per layer norm and loop trip).

A value only on the chains of residuals the forward hands out of its fusion has no saving copy:
the program without remat saves those from there. So does a residual the forward hands out
narrowed where only matmuls read it (TPU reads their operands in bf16): a layer norm's output,
all-gathered in bf16 for the next matmul under tensor parallelism (TPU draw 10, linen_scan:
multiply -4,096, the product `(x - mean) * r` counted one short per layer norm). Not one read
wide: tanh's output, handed out narrowed for the next matmul but read in f32 by its derivative,
which the saving fusion computes again from the bias add (TPU draw 44, exact before and after).
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("haiku")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def _after(seed: int, monkeypatch):
    # Other processes (a TPU catalogue job) may hold libtpu's lockfile: no chip is used here.
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    return outcome, next(v for v in outcome.verdicts if v.stage == "after")


def test_a_stacked_residual_of_broadcasts_on_another_residuals_chain_has_two_saving_copies(monkeypatch):
    outcome, after = _after(1, monkeypatch)
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.matmul_ok("after") and outcome.in_bounds("after"), outcome.describe()


def test_a_value_on_the_chain_of_a_residual_the_forward_hands_out_narrowed_has_no_saving_copy(monkeypatch):
    outcome, after = _after(10, monkeypatch)
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()


def test_a_residual_read_wide_but_handed_out_narrowed_keeps_its_saving_copy(monkeypatch):
    outcome, _ = _after(44, monkeypatch)
    assert outcome.all_ok("after"), outcome.describe()
