"""A loss scale `g * c` stored by a loop fusion with no matmul (hloflops.remat.stored_scales): the
program without remat may store it too (TPU 41, 42, 76, 123, 141, 156, 179, 195: read by a convert
narrowing it for the matmuls, multi-output or output fusions and a reduce) or copy it into each reader
(TPU 9, 19, 137, 159, 185, 191, 209, 294, 297, 341, 345, 348: read by a single-output loop fusion or a
bare elementwise op, which XLA fuses a cheap producer into). Only where some reader is such a fusion
or op (on TPU) are the readers' k - 1 copies a `twin_copies` hinge: held-out TPU 294 (hk_loop fsdp,
the twin runs the scale three times against one, multiply +256 over the truth: low end 192 above the
truth 128 before, -576 after)."""

from __future__ import annotations

import pytest

from tests.remat.test_remat_cascaded_readers import CASCADE
from tests.remat.test_remat_stored_scales import _scale_hinges

# The scale's fusion computes `pred` with an add, not a matmul: a loop fusion.
LOOP_CASCADE = CASCADE.replace(
    "%pred = f32[4,4] dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata=",
    "%pred = f32[4,4] add(%p0, %p1), metadata=").replace("kind=kOutput, calls=%loss", "kind=kLoop, calls=%loss")


def test_a_loop_fusion_storing_the_scale_read_by_a_cheap_loop_fusion_lowers_the_range():
    assert "calls=%loss" in LOOP_CASCADE and "dot(%p0, %p1)" not in LOOP_CASCADE
    acc, hinges = _scale_hinges(LOOP_CASCADE)
    # as with a matmul's fusion: the dW, dX fusions, the reduce and the cheap reader's two readers
    assert sorted((h.name, h.opcode, h.twin_copies) for h in hinges) == [("g", "multiply", 4), ("s", "add", 1)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 4 * 16 - 16 and high >= acc.remat_flops  # the count does not move


def test_a_loop_fusion_storing_the_scale_for_output_fusions_and_a_reduce_only_is_left_alone():
    # no reader the twin would fuse the scale into: it stores it too (TPU 42, 195)
    stored = LOOP_CASCADE.replace("fusion(%grad, %v), kind=kLoop, calls=%cheap",
                                  "fusion(%x, %v), kind=kLoop, calls=%cheap")
    assert _scale_hinges(stored)[1] == []


def test_drawn_tpu_294_loss_scale_of_a_loop_fusion_puts_the_truth_inside_the_range(monkeypatch):
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(294, monkeypatch)  # hk_loop fsdp: truth 128, low end 192 before
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.in_bounds, verdict.describe()
