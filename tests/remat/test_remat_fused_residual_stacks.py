"""A scan's backward loop whose gradient fusion computes the checkpoint's recompute in f32
(analysis/hloflops/remat/fused_residual_stacks.py). The recompute's `t = tanh(h)` (h widened from
bfloat16) is read by the gradient's multiply inside the fusion `grad`: no convert touches `t` here.
The program without remat stacks `t` in bfloat16 in its forward loop (a narrow) and widens the slice
its backward reads (a widen): two converts per trip this program never runs (TPU draw 260: gelu's
four residuals, convert +19.9M -> +1.0M after optimization). Taken off a convert of the fusion of
`t`'s size as a sure share (`twin_stores`), where `h` is the backward loop's recompute, not a value
this program stores itself."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat

HLO = """HloModule fused_residuals, is_scheduled=true, entry_computation_layout=@L

grad {
  p0 = bf16[8,128] parameter(0)
  p1 = bf16[8,128] parameter(1)
  hw = f32[8,128] convert(p0)
  t = f32[8,128] tanh(hw), metadata={op_name="@R/tanh"}
  cw = f32[8,128] convert(p1)
  g = f32[8,128] multiply(t, cw), metadata={op_name="@B/mul"}
  ROOT n = bf16[8,128] convert(g)
}

rec {
  q = bf16[8,128] parameter(0)
  ROOT e = bf16[8,128] exponential(q), metadata={op_name="@R/exp"}
}

body {
  s = (s32[], bf16[8,128], bf16[8,128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = bf16[8,128] get-tuple-element(s), index=1
  c = bf16[8,128] get-tuple-element(s), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  hr = bf16[8,128] fusion(h), kind=kLoop, calls=rec
  f = bf16[8,128] fusion(hr, c), kind=kLoop, calls=grad, @T
  ROOT r = (s32[], bf16[8,128], bf16[8,128]) tuple(j, h, f)
}

cond {
  cs = (s32[], bf16[8,128], bf16[8,128]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

ENTRY main {
  x = bf16[8,128] parameter(0)
  ct = bf16[8,128] parameter(1)
  zero = s32[] constant(0)
  st = (s32[], bf16[8,128], bf16[8,128]) tuple(zero, x, ct)
  l = (s32[], bf16[8,128], bf16[8,128]) while(st), condition=cond, body=body, metadata={op_name="@W"}
  ROOT out = bf16[8,128] get-tuple-element(l), index=2
}
"""


def _parsed(text: str):
    """@R the checkpoint's recompute, @B its backward, @W the backward loop; @L the entry's layout
    and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(LM))/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(LM))/while/body/checkpoint"),
                        ("@W", "jit(loss)/transpose(jvp(LM))/while"),
                        ("@L", "{(bf16[8,128]{1,0:T(8,128)(2,1)})->bf16[8,128]{1,0:T(8,128)(2,1)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_recompute_fused_with_its_gradient_in_a_scan_takes_off_the_twins_stack_converts():
    index = find_remat(_parsed(HLO))
    # t's narrow into the twin's stack and the widen of its slice: 2 converts, on one of grad's
    assert sum(index.twin_stores.values()) == 2
    (key,) = index.twin_stores
    assert key[0] == "grad" and key[1] in ("hw", "cw", "n")
    rows = account(_parsed(HLO), xla={"flops": 0.0}).rows
    convert = sum(r.remat_flops for r in rows if r.opcode == "convert" and r.remat)
    assert convert == -2 * 8 * 128 * 4  # two slices a trip, four trips


def test_a_residual_computed_from_an_f32_input_is_stacked_wide():
    # layer norm's statistics: flax computes them in f32, so the twin stacks them with no convert
    text = HLO.replace("p0 = bf16[8,128] parameter(0)", "p0 = f32[8,128] parameter(0)").replace(
        "hw = f32[8,128] convert(p0)", "hw = f32[8,128] negate(p0)")
    text = text.replace("hr = bf16[8,128] fusion(h)", "hr = f32[8,128] fusion(h)").replace(
        "  ROOT e = bf16[8,128] exponential(q)", "  ROOT e = f32[8,128] exponential(q)")
    assert not find_remat(_parsed(text)).twin_stores


def test_a_residual_of_a_value_this_program_stores_is_left_alone():
    # A policy's saved pre-activation, sliced from this program's own stack: that stack and the
    # widen of its slice stand for part of the twin's (TPU draws 37, 181: convert exact without it).
    text = HLO.replace("f = bf16[8,128] fusion(hr, c)", "f = bf16[8,128] fusion(h, c)")
    assert not find_remat(_parsed(text)).twin_stores


def test_no_stack_without_a_loop():
    # An unrolled loop: the twin fuses its residuals as this program does.
    entry = HLO.index("ENTRY main {")
    text = HLO[:entry] + """ENTRY main {
  x = bf16[8,128] parameter(0)
  ct = bf16[8,128] parameter(1)
  ROOT out = bf16[8,128] fusion(x, ct), kind=kLoop, calls=grad, @T
}
"""
    assert not find_remat(_parsed(text)).twin_stores
