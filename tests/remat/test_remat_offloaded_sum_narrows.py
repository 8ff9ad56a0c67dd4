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
