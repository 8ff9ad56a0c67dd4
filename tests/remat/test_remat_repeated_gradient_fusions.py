"""Scan forms after optimization where XLA repeats a gradient fusion of the backward loop, one per
consumer layout (hloflops.remat.twin_saves), and where a recompute handed out relaid out stands in
for the twin's saving copy (hloflops.remat.saved_copies).

A layer norm's backward in a scanned attention block: XLA builds the gradient through `x - mean`
in four fusions (one per layout its readers want), each recomputing `x - mean` from the saved
input; the program without remat builds the same four, reading the one `x - mean` it saved.
Counting one save per gradient fusion made all four copies stand for saving copies (more seed 98:
subtract -32,752, -196,592 on seed 84); one per distinct residual value, too few where other
values read `x - mean` (+16,400 on seed 98, +131,088 on seed 84). Now a residual read is a save
unless an earlier gradient fusion makes it too (the same reading values), and the repeats' copies
are remat.

A recompute fusion that hands out its value only through moves (a transposed attention value,
`bitcast(copy(transpose(v + b)))`) to a backward matmul stands in for the copy the program without
remat makes saving the value, as one handing it out as it is does (base seed 16: add +24,576
before, the rest is the twin's own extra copies)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402
from tests.remat.judge import COUNTER_OPCODES, LOOP_TOLERANCE  # noqa: E402


@pytest.mark.parametrize("family,seed,opcode", [
    ("more", 98, "subtract"),  # hk_layer_stack attention, dots_with_no_batch_dims_saveable: subtract -32,752 before
    ("base", 135, "add"),  # scan attention, no policy: add -16,384 before
], ids=["more98-subtract", "base135-add"])
def test_repeated_gradient_fusions_recompute_their_residuals(family, seed, opcode):
    outcome = check(draw(seed, family))
    after = outcome._at("after")
    slack = LOOP_TOLERANCE * after.loops if opcode in COUNTER_OPCODES else 0
    assert abs(after.misses.get(opcode, 0)) <= slack, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


def test_relaid_out_recompute_stands_in_for_the_saving_copy():
    outcome = check(draw(16, "base"))  # linen_remat_scan LM, no policy
    after = outcome._at("after")
    # 24,576 over on 659f174, 16,384 with the stand-in alone; the residuals handed to backward
    # matmuls (twin_saves) take the rest: add exact.
    assert abs(after.misses.get("add", 0)) <= LOOP_TOLERANCE * after.loops, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
