"""The narrows of a stored `x @ w + b` the program without remat may make where this program
offloads the bare `x @ w` (analysis/hloflops/remat/offloaded_sum_narrows.py).

TPU draw 51 (hk_loop, offload_dot_with_no_batch_dims, relu, fsdp): each matmul reading `relu(h + b)`
nests the bias add and the relu in an f32 operand fusion of its own; the program without remat
stores the sum and narrows `relu(sum)` to bf16 in six of its operand fusions: convert truth
-6,144, total truth 0, while the range was [3,072, 6,144]. Each nested activation now stands for
one narrow the program without remat may make (a `twin_copies` hinge: the low end only), and the
draw whose two programs nest alike (TPU 47) keeps its range.
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("haiku")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_nested_activations_of_an_offloaded_matmul_output_lower_the_range(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(51, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert after.bounds is not None and after.bounds[0] <= 0, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


def test_relu_reading_an_offloaded_matmul_output_in_a_scan_lowers_the_range(monkeypatch):
    """Held-out TPU draw 114 (a scan of relu MLPs, save_and_offload_only_these_names): this program
    keeps the matmul output `h` wide for the host and narrows each relu copy; the program without
    remat narrows `h` in its matmul's fusion and widens it in each relu copy, three converts of
    `[8, 128]` a layer more (convert truth -9,216). `offloaded_source_narrows` lowers the low end to
    it (a `twin_copies` hinge), the count unchanged."""
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(114, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert after.bounds is not None and after.bounds[0] <= sum(after.truth.values()) < 0, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
