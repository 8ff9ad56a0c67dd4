"""A recompute's copy TPU nests inside the fusion of a recomputed matmul that is itself nested in a
gradient fusion (analysis/hloflops/remat/recomputed_matmul_nests.py). `_nested_in_gradient_matmuls`
and `_same_value` judged such a copy by the outermost fusion (a gradient fusion's: model FLOPs); but
the matmul it feeds runs only because of remat, so the program without remat has no copy there, and
whether it makes one elsewhere (a second forward copy) this program does not show: the copy stays
model FLOPs and the high end counts it (TPU ytpu 456: gelu nested in the recomputed `Dense_1` inside
gelu's gradient fusion; the twin keeps a second forward copy, 98,304 multiply FLOPs of truth above
the old high end)."""

from __future__ import annotations

from hloflops.accounting import account
from tests.remat.test_remat_nested_fusions import NESTED_FORWARD, _parsed

# The backward recomputes Dense_1 (its bias add nested in the matmul's fusion) inside the fusion of
# a gradient that reads the recomputed output; the weight gradient's nested copy stays as it was.
RECOMPUTED_IN_GRADIENT = NESTED_FORWARD.replace("""ENTRY main {""", """bias_rec {
  t0 = f32[8,16] parameter(0)
  t1 = f32[16] parameter(1)
  tb = f32[8,16] broadcast(t1), dimensions={1}
  ROOT rca = f32[8,16] add(t0, tb), metadata={op_name="@R/Dense_0/add"}
}

matmul_rec {
  u0 = f32[8,16] parameter(0)
  u1 = f32[16] parameter(1)
  u2 = f32[16,8] parameter(2)
  rf = f32[8,16] fusion(u0, u1), kind=kLoop, calls=bias_rec
  ROOT rd = f32[8,8] dot(rf, u2), @D, metadata={op_name="@R/Dense_1/dot_general"}
}

grad_outer {
  v0 = f32[8,16] parameter(0)
  v1 = f32[16] parameter(1)
  v2 = f32[16,8] parameter(2)
  v3 = f32[8,8] parameter(3)
  rec = f32[8,8] fusion(v0, v1, v2), kind=kOutput, calls=matmul_rec
  ROOT gm = f32[8,8] multiply(rec, v3), metadata={op_name="@B/Dense_1/mul"}
}

ENTRY main {""").replace("  ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)",
                         "  gr = f32[8,8] fusion(x, b, w, dy), kind=kOutput, calls=grad_outer\n"
                         "  ROOT out = (f32[8,8], f32[16,8], f32[8,8]) tuple(y, dw, gr)")


def _bounds(text: str) -> tuple[int, int, int]:
    acc = account(_parsed(text), xla={"flops": 0.0})
    low, high = acc.remat_flops_bounds
    return low, high, sum(r.remat_flops for r in acc.rows if r.remat)


def test_a_copy_nested_in_a_recomputed_matmul_inside_a_gradient_fusion_is_counted_by_the_high_end():
    low, high, remat = _bounds(RECOMPUTED_IN_GRADIENT)
    # the recomputed matmul (8 x 8 x 16 multiply-adds) is remat; the nested bias add (128 adds) a hinge
    assert remat <= low and high >= remat + 128 and high > low


def test_without_the_recomputed_matmul_the_nested_weight_gradient_copy_keeps_no_range():
    low, high, _ = _bounds(NESTED_FORWARD)
    assert low == high
