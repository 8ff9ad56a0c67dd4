"""A recomputed layer norm statistic the program without remat computes twice in its forward
(analysis/hloflops/remat/twin_residual_copies.py). Where jax differentiates inside a function the
step calls (an unrolled gradient accumulation's per-microbatch gradient, `closed_call/jvp()`), the
program without remat's forward computes `r = rsqrt(var / n + eps)` once unit-free for its matmul
fusions and once more in jax's `[b, t, 1]` shape as the residual the input gradient reads (TPU
draws 48 and 54: six layer norms of eight; add +96 / +1,536 after optimization). This program's
recompute computes `r` once, in a fusion (`rsqrt_r`) that the recomputed matmul's fusion and the
transpose's own `ct * r` (`grad_b`) both read: it stands for that second forward copy, model FLOPs.
Here `stats_f`/`rsqrt_f`/`norm_f` are the forward, `stats_r`/`rsqrt_r`/`norm_r` its recompute."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule residual_statistic, is_scheduled=true, entry_computation_layout=@L

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

stats_f {
  a0 = f32[2,8,32] parameter(0)
  sq = f32[2,8,32] multiply(a0, a0), metadata={op_name="@F/square"}
  z = f32[] constant(0)
  ROOT s.f = f32[2,8] reduce(sq, z), dimensions={2}, to_apply=sum, metadata={op_name="@F/reduce_sum"}
}

rsqrt_f {
  b0 = f32[2,8] parameter(0)
  c = f32[] constant(0.03125)
  bc = f32[2,8] broadcast(c), dimensions={}
  m = f32[2,8] multiply(b0, bc), metadata={op_name="@F/div"}
  e = f32[] constant(1e-06)
  be = f32[2,8] broadcast(e), dimensions={}
  a = f32[2,8] add(m, be), metadata={op_name="@F/add"}
  ROOT r = f32[2,8] rsqrt(a), metadata={op_name="@F/rsqrt"}
}

norm_f {
  n0 = f32[2,8,32] parameter(0)
  n1 = f32[2,8] parameter(1)
  n2 = f32[32,16] parameter(2)
  br = f32[2,8,32] broadcast(n1), dimensions={0,1}, metadata={op_name="@F/mul"}
  y = f32[2,8,32] multiply(n0, br), metadata={op_name="@F/mul"}
  ROOT d = f32[2,8,16] dot(y, n2), @D, metadata={op_name="@F/dot_general"}
}

stats_r {
  a0.r = f32[2,8,32] parameter(0)
  sq.r = f32[2,8,32] multiply(a0.r, a0.r), metadata={op_name="@R/square"}
  z.r = f32[] constant(0)
  ROOT s.r = f32[2,8] reduce(sq.r, z.r), dimensions={2}, to_apply=sum, metadata={op_name="@R/reduce_sum"}
}

rsqrt_r {
  b0.r = f32[2,8] parameter(0)
  c.r = f32[] constant(0.03125)
  bc.r = f32[2,8] broadcast(c.r), dimensions={}
  m.r = f32[2,8] multiply(b0.r, bc.r), metadata={op_name="@R/div"}
  e.r = f32[] constant(1e-06)
  be.r = f32[2,8] broadcast(e.r), dimensions={}
  a.r = f32[2,8] add(m.r, be.r), metadata={op_name="@R/add"}
  ROOT r.r = f32[2,8] rsqrt(a.r), metadata={op_name="@R/rsqrt"}
}

norm_r {
  n0.r = f32[2,8,32] parameter(0)
  n1.r = f32[2,8] parameter(1)
  n2.r = f32[32,16] parameter(2)
  br.r = f32[2,8,32] broadcast(n1.r), dimensions={0,1}, metadata={op_name="@R/mul"}
  y.r = f32[2,8,32] multiply(n0.r, br.r), metadata={op_name="@R/mul"}
  ROOT d.r = f32[2,8,16] dot(y.r, n2.r), @D, metadata={op_name="@R/dot_general"}
}

coef_b {
  k0 = f32[2,8] parameter(0)
  k1 = f32[2,8] parameter(1)
  kc = f32[] constant(0.03125)
  kbc = f32[2,8] broadcast(kc), dimensions={}
  km = f32[2,8] multiply(k0, kbc), metadata={op_name="@R/div"}
  ke = f32[] constant(1e-06)
  kbe = f32[2,8] broadcast(ke), dimensions={}
  ka = f32[2,8] add(km, kbe), metadata={op_name="@R/add"}
  kr = f32[2,8] rsqrt(ka), metadata={op_name="@R/rsqrt"}
  kd = f32[2,8] divide(kr, ka), metadata={op_name="@R/div"}
  ROOT kg = f32[2,8] multiply(k1, kd), metadata={op_name="@B/mul"}
}

grad_b {
  g0 = f32[2,8,32] parameter(0)
  g1 = f32[2,8] parameter(1)
  bg = f32[2,8,32] broadcast(g1), dimensions={0,1}, metadata={op_name="@R/mul"}
  ROOT gm = f32[2,8,32] multiply(g0, bg), metadata={op_name="@B/mul"}
}

ENTRY main {
  x = f32[2,8,32] parameter(0)
  w = f32[32,16] parameter(1)
  ct = f32[2,8,32] parameter(2)
  sf = f32[2,8] fusion(x), kind=kInput, calls=stats_f, @T
  rf = f32[2,8] fusion(sf), kind=kLoop, calls=rsqrt_f
  yf = f32[2,8,16] fusion(x, rf, w), kind=kOutput, calls=norm_f
  sr = f32[2,8] fusion(x), kind=kInput, calls=stats_r
  rr = f32[2,8] fusion(sr), kind=kLoop, calls=rsqrt_r
  yr = f32[2,8,16] fusion(x, rr, w), kind=kOutput, calls=norm_r
  g = f32[2,8,32] fusion(ct, rr), kind=kLoop, calls=grad_b
  cs = f32[2,8] parameter(3)
  k = f32[2,8] fusion(sr, cs), kind=kLoop, calls=coef_b
  ROOT out = (f32[2,8,16], f32[2,8,16], f32[2,8,32], f32[2,8]) tuple(yf, yr, g, k)
}
"""

# A per-microbatch gradient: jax differentiates inside the function the step calls.
IN_A_CALL = ("jit(step)/closed_call/transpose(jvp())/closed_call/checkpoint",
             "jit(step)/closed_call/jvp()/closed_call")
# The loss differentiated at the top of the program (TPU 27: its program without remat computes
# the statistic once, for its matmuls and its backward alike).
AT_THE_TOP = ("jit(loss)/transpose(jvp())/closed_call/checkpoint", "jit(loss)/jvp()/closed_call")


def _parsed(text: str, names: tuple[str, str]):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    backward, forward = names
    for short, long in (("@D", "lhs_contracting_dims={2}, rhs_contracting_dims={0}"),
                        ("@R", backward + "/rematted_computation"), ("@B", backward), ("@F", forward),
                        ("@L", "{(f32[2,8,32]{2,1,0:T(8,128)})->f32[2,8,16]{2,1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


RSQRT_CHAIN = [("rsqrt_r", "m.r"), ("rsqrt_r", "a.r"), ("rsqrt_r", "r.r")]
COEFFICIENT = [("coef_b", "km"), ("coef_b", "ka")]


def test_a_recomputed_statistic_read_by_the_recompute_and_the_transpose_stands_for_the_twins_copy():
    index = find_remat(_parsed(HLO, IN_A_CALL))
    assert ("norm_r", "d.r") in index and ("stats_r", "s.r") in index
    assert not any(key in index for key in RSQRT_CHAIN)
    # The chain copied into the fusion of rsqrt's coefficient (`grad_b`'s sibling `coef_b`): that
    # program's gradient fusion copies it too.
    assert not any(key in index for key in COEFFICIENT)


def test_the_statistic_differentiated_at_the_top_of_the_program_stays_remat():
    index = find_remat(_parsed(HLO, AT_THE_TOP))
    assert all(key in index for key in RSQRT_CHAIN)


def test_a_statistic_no_backward_op_reads_stays_remat():
    # The first layer's norm: no input gradient reads `r`, and the program without remat computes
    # it once, in its forward.
    text = HLO.replace("  g = f32[2,8,32] fusion(ct, rr), kind=kLoop, calls=grad_b\n",
                       "  g = f32[2,8,32] fusion(ct, sr), kind=kLoop, calls=grad_b\n")
    index = find_remat(_parsed(text, IN_A_CALL))
    assert all(key in index for key in RSQRT_CHAIN)


def test_a_statistic_only_the_forward_computes_lowers_the_low_end():
    # CSE merged the recompute into the forward (held-out TPU 119, no `prevent_cse`): the
    # transpose reads the forward's statistic, which the program without remat computes once more.
    text = HLO.replace("  g = f32[2,8,32] fusion(ct, rr), kind=kLoop, calls=grad_b\n",
                       "  g = f32[2,8,32] fusion(ct, rf), kind=kLoop, calls=grad_b\n")
    index = find_remat(_parsed(text, IN_A_CALL))
    assert {key: n for key, n in index.twin_copies.items() if key[0] == "rsqrt_f"} == \
        {("rsqrt_f", "m"): 1, ("rsqrt_f", "a"): 1, ("rsqrt_f", "r"): 1}
    assert not any(key[0] == "rsqrt_f" for key in find_remat(_parsed(text, AT_THE_TOP)).twin_copies)


def test_a_module_with_a_loop_is_left_alone():
    # A scan's backward loop reads stored residuals (hloflops.remat.backward_loop_copies).
    text = HLO.replace("ENTRY main {", """cond {
  cp = (s32[]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  cn = s32[] constant(2)
  ROOT lt = pred[] compare(ci, cn), direction=LT
}

body {
  bp = (s32[]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  one = s32[] constant(1)
  nx = s32[] add(bi, one)
  ROOT bt = (s32[]) tuple(nx)
}

ENTRY main {
  i0 = s32[] constant(0)
  lp = (s32[]) tuple(i0)
  wl = (s32[]) while(lp), condition=cond, body=body""")
    index = find_remat(_parsed(text, IN_A_CALL))
    assert all(key in index for key in RSQRT_CHAIN)


# Drawn TPU programs: 48 (single device) and 54 (FSDP, bf16), unrolled gradient accumulation. Add
# over-counted by six (54: six bf16) recomputed statistics before (+96 / +1,536): exact now on 48.
# Held-out 119 (FSDP, no `prevent_cse`): truth -1,536 (add and multiply -768), below the range's
# low end 0 before; the low end is the truth now.
@pytest.mark.parametrize("seed", [48, 54, 119])
def test_drawn_tpu_gradient_accumulation_statistics(seed, monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("equinox")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw

    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert outcome.in_bounds("after"), outcome.describe()
    assert after.misses.get("add", 0) == {48: 0, 54: 8192, 119: 768}[seed], outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
