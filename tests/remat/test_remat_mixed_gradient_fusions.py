"""A gradient fusion that also hands out a recomputed matmul's output (analysis/hloflops/remat/
mixed_gradient_fusions.py). With the forward and the backward in one computation, TPU fuses the
recomputed `h = x @ w + b` into the fusion computing the gradient that reads gelu's chain of `h`,
and hands `h` out to the weight's gradient. The program without remat stores `h` from its forward
matmul's fusion and builds the same gradient fusion reading it, copying the cheap chain of `h` into
it: only the matmul and its bias add run there because of remat (TPU draws 50 and 52: add +2,048 /
+512 and multiply +6,272 / +2,048 after optimization, out of range). Here `fwd` computes `h`, its
cube `c = h * h * h` and the loss; `grad` recomputes `h` (`d.r`, `y.r`) and the cube (`s.r`, `c.r`)
under the gradient `g = c.r * t`, its reduce and its bf16 narrowing; `wgrad` reads the recomputed `h`."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat
from tests.remat.judge import by_opcode

HLO = """HloModule one_layer_unrolled, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fwd {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[8,4] dot(p0, p1), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = f32[8,4] broadcast(p2), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,4] add(d, bb), metadata={op_name="@F/Dense_0/add"}
  s = f32[8,4] multiply(y, y), metadata={op_name="@F/integer_pow"}
  c = f32[8,4] multiply(s, y), metadata={op_name="@F/integer_pow"}
  z = f32[] constant(0)
  ROOT l = f32[] reduce(c, z), dimensions={0,1}, to_apply=sum, metadata={op_name="jit(loss)/jvp()/reduce_sum"}
}

grad {
  q0 = f32[8,16] parameter(0)
  q1 = f32[16,4] parameter(1)
  q2 = f32[4] parameter(2)
  q3 = f32[8,4] parameter(3)
  d.r = f32[8,4] dot(q0, q1), @D, metadata={op_name="@R/Dense_0/dot_general"}
  bb.r = f32[8,4] broadcast(q2), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = f32[8,4] add(d.r, bb.r), metadata={op_name="@R/Dense_0/add"}
  s.r = f32[8,4] multiply(y.r, y.r), metadata={op_name="@R/integer_pow"}
  c.r = f32[8,4] multiply(s.r, y.r), metadata={op_name="@R/integer_pow"}
  g = f32[8,4] multiply(c.r, q3), metadata={op_name="@B/mul"}
  z.1 = f32[] constant(0)
  gb = f32[4] reduce(g, z.1), dimensions={0}, to_apply=sum, metadata={op_name="@B/Dense_0/reduce_sum"}
  gc = bf16[8,4] convert(g)
  ROOT t = (f32[4], bf16[8,4], f32[8,4]) tuple(gb, gc, y.r)
}

wgrad {
  r0 = f32[8,16] parameter(0)
  r1 = f32[8,4] parameter(1)
  ROOT wg = f32[16,4] dot(r0, r1), @W, metadata={op_name="@B/Dense_0/dot_general"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  b = f32[4] parameter(2)
  t = f32[8,4] parameter(3)
  l = f32[] fusion(x, w, b), kind=kOutput, calls=fwd, metadata={op_name="@F/Dense_0/dot_general"}
  gr = (f32[4], bf16[8,4], f32[8,4]) fusion(x, w, b, t), kind=kOutput, calls=grad, metadata={op_name="@R/Dense_0/mm"}
  h.r = f32[8,4] get-tuple-element(gr), index=2
  wg = f32[16,4] fusion(x, h.r), kind=kOutput, calls=wgrad, metadata={op_name="@B/Dense_0/dot_general"}
  ROOT out = (f32[], (f32[4], bf16[8,4], f32[8,4]), f32[16,4]) tuple(l, gr, wg)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D, @W matmuls' dimensions."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@W", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/mlp"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/mlp"), ("@F", "jit(loss)/jvp()/mlp")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_gradient_side_of_a_fusion_handing_out_a_recomputed_matmul_is_the_twins_gradient_fusion():
    module = _parsed(HLO)
    index = find_remat(module)
    # The recomputed matmul and its bias add, which the program without remat stores: recompute.
    assert ("grad", "d.r") in index and ("grad", "y.r") in index
    # The cube of `h` the gradient reads: copied into that program's gradient fusion as well.
    assert ("grad", "s.r") not in index and ("grad", "c.r") not in index
    assert ("grad", "g") not in index and ("fwd", "c") not in index
    acc = account(module, xla={"flops": 0.0})
    assert by_opcode(acc, remat=True) == {"dot": 2 * 8 * 4 * 16, "add": 8 * 4}


def test_a_fusion_handing_out_a_recomputed_chain_but_no_matmul_output_keeps_its_copies():
    # The fusion hands out the recomputed cube, not `h`: no stored matmul output of the program
    # without remat stands behind it, and its copies run because of remat as its output does.
    index = find_remat(_parsed(HLO.replace("tuple(gb, gc, y.r)", "tuple(gb, gc, c.r)")))
    assert ("grad", "d.r") in index and ("grad", "s.r") in index and ("grad", "c.r") in index


# Drawn TPU programs: 50 (an nnx scan of one layer, unrolled) and 52 (an equinox list of one layer,
# FSDP), each a gelu MLP whose recomputed `h` TPU fuses into gelu's gradient fusion. Out of range
# before (add +2,048 / +512, multiply +6,272 / +2,048); in range now, with no add missed. What
# multiply still misses is not attainable: the twin copies the loss's scale into two more fusions
# (multiply truth -128 and -512); 52's convert -1,024 is another rule's (an FSDP weight narrowing).
@pytest.mark.parametrize("seed", [50, 52])
def test_drawn_tpu_gelu_recomputed_into_its_gradient_fusion_is_in_range(seed, monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("equinox")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw

    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert outcome.in_bounds("after"), outcome.describe()
    assert "add" not in after.misses, outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
