"""A reduce whose two copies differ by a unit dimension (issue 28, base draws 79, 82, 100, 102:
gradient accumulation with every scan unrolled). XLA moved a reshape into the forward's layer-norm
sum of x, which reads `f32[1,2,32,64]` over dimensions {0,3}, and left the recompute's reading
`f32[2,32,64]` over {2}. The recompute's sum of x then had no twin of its signature, took the
twin of the sum of x * x (same shapes, same name `reduce_sum`, same layer's inputs), and one
recomputed sum per microbatch paired with nothing: reduce -8,064 on draw 82. A reduce's
signature (hloflops.remat.signature) now leaves unit dimensions out."""

from __future__ import annotations

import pytest
from hloflops.remat.signature import unit_dimension_free

SUM = ("f32", ())  # a reduce's initial value


def test_a_reduce_over_a_unit_dimension_has_the_signature_of_the_reduce_without_it():
    forward = unit_dimension_free((("f32", (1, 2, 32, 64)), SUM), (("dimensions", "{0,3}"),))
    recompute = unit_dimension_free((("f32", (2, 32, 64)), SUM), (("dimensions", "{2}"),))
    assert forward == recompute == (((("f32", (2, 32, 64)), SUM)), (("dimensions", "{2}"),))


def test_reduced_dimensions_other_than_unit_ones_still_differ():
    over_rows = unit_dimension_free((("f32", (1, 2, 32, 64)), SUM), (("dimensions", "{0,2}"),))
    over_columns = unit_dimension_free((("f32", (2, 32, 64)), SUM), (("dimensions", "{2}"),))
    assert over_rows[1] == (("dimensions", "{1}"),)
    assert over_rows != over_columns


def test_a_variadic_reduce_keeps_its_shapes_where_its_arrays_differ():
    operands = (("f32", (1, 8)), ("s32", (8,)), SUM, ("s32", ()))
    attributes = (("dimensions", "{1}"),)
    assert unit_dimension_free(operands, attributes) == (operands, attributes)


@pytest.mark.parametrize("seed", [82, 79])
def test_unrolled_gradient_accumulation_counts_every_recomputed_layer_norm_sum(seed):
    """Base draws 82 (reduce -8,064) and 79 (reduce -16,128): every reduce exact after
    optimization, and every other opcode too: 82's recompute of softmax's `1 / s`, which XLA
    named after the backward, is marked by its folded cotangent (hloflops.remat.marks
    `recomputes_named_in_transpose`; tests/remat/test_remat_taken_forwards.py)."""
    pytest.importorskip("jax")
    from tests.remat.generator import check, draw

    outcome = check(draw(seed))
    after = outcome._at("after")
    assert after.truth.get("reduce"), outcome.describe()  # the layer norms' sums are recomputed
    assert "reduce" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("after"), outcome.describe()
