"""A weight shard narrowed again inside a scan's backward loop, for the recompute's gather
(analysis/hloflops/remat/regathered_loop_narrows.py). The stack of weights rides both loops as a
state element; the forward loop gathers each trip's slice wide, and the backward loop, whose
recompute reads the weight through jax's barrier, narrows its slice (`n.r`, of the fusion `sl.r`
whose root is the dynamic slice) before gathering it again. The program without remat gathers its
backward's slice as its forward does (held-out TPU draw 475, an FSDP fori_loop MLP: convert -5,376,
the high end below the truth). Unsure: only the high end counts it. A named cast, a narrow no gather
reads, and a narrow in the forward loop are left alone."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule regathered_loop, is_scheduled=true, entry_computation_layout=@L

slice.f {
  p.f = f32[3,2,8] parameter(0)
  i.f = s32[] parameter(1)
  z.f = s32[] constant(0)
  ROOT d.f = f32[1,2,8] dynamic-slice(p.f, i.f, z.f, z.f), dynamic_slice_sizes={1,2,8}
}

slice.r {
  p.s = f32[3,2,8] parameter(0)
  i.s = s32[] parameter(1)
  z.s = s32[] constant(0)
  ROOT d.s = f32[1,2,8] dynamic-slice(p.s, i.s, z.s, z.s), dynamic_slice_sizes={1,2,8}
}

forward {
  s.1 = (s32[], f32[8,8], f32[3,2,8]) parameter(0)
  i.1 = s32[] get-tuple-element(s.1), index=0
  x.1 = f32[8,8] get-tuple-element(s.1), index=1
  w.1 = f32[3,2,8] get-tuple-element(s.1), index=2
  sl = f32[1,2,8] fusion(w.1, i.1), kind=kLoop, calls=slice.f
  b = f32[2,8] bitcast(sl)
  a = f32[8,8] all-gather(b), dimensions={0}, replica_groups={{0,1,2,3}}, @T
  h = f32[8,8] dot(x.1, a), @D, metadata={op_name="@F/while/body/dot_general"}
  t = f32[8,8] tanh(h), metadata={op_name="@F/while/body/tanh"}
  one.1 = s32[] constant(1)
  j.1 = s32[] add(i.1, one.1)
  ROOT r.1 = (s32[], f32[8,8], f32[3,2,8]) tuple(j.1, t, w.1)
}

backward {
  s.2 = (s32[], f32[8,8], f32[3,2,8]) parameter(0)
  i.2 = s32[] get-tuple-element(s.2), index=0
  g.2 = f32[8,8] get-tuple-element(s.2), index=1
  w.2 = f32[3,2,8] get-tuple-element(s.2), index=2
  sl.r = f32[1,2,8] fusion(w.2, i.2), kind=kLoop, calls=slice.r
  b.r = f32[2,8] bitcast(sl.r)
  n.r = bf16[2,8] convert(b.r)
  a.r = bf16[8,8] all-gather(n.r), dimensions={0}, replica_groups={{0,1,2,3}}
  gb = bf16[8,8] convert(g.2), metadata={op_name="@B/while/body/convert_element_type"}
  h.r = f32[8,8] dot(gb, a.r), @D, metadata={op_name="@R/while/body/dot_general"}
  t.r = f32[8,8] tanh(h.r), metadata={op_name="@R/while/body/tanh"}
  m = f32[8,8] multiply(t.r, g.2), metadata={op_name="@B/while/body/mul"}
  one.2 = s32[] constant(1)
  j.2 = s32[] add(i.2, one.2)
  ROOT r.2 = (s32[], f32[8,8], f32[3,2,8]) tuple(j.2, m, w.2)
}

cond.1 {
  c.1 = (s32[], f32[8,8], f32[3,2,8]) parameter(0)
  k.1 = s32[] get-tuple-element(c.1), index=0
  three.1 = s32[] constant(3)
  ROOT lt.1 = pred[] compare(k.1, three.1), direction=LT
}

cond.2 {
  c.2 = (s32[], f32[8,8], f32[3,2,8]) parameter(0)
  k.2 = s32[] get-tuple-element(c.2), index=0
  three.2 = s32[] constant(3)
  ROOT lt.2 = pred[] compare(k.2, three.2), direction=LT
}

ENTRY main {
  x = f32[8,8] parameter(0)
  w = f32[3,2,8] parameter(1)
  zero = s32[] constant(0)
  init.1 = (s32[], f32[8,8], f32[3,2,8]) tuple(zero, x, w)
  loop.1 = (s32[], f32[8,8], f32[3,2,8]) while(init.1), condition=cond.1, body=forward, @K
  y = f32[8,8] get-tuple-element(loop.1), index=1
  init.2 = (s32[], f32[8,8], f32[3,2,8]) tuple(zero, y, w)
  loop.2 = (s32[], f32[8,8], f32[3,2,8]) while(init.2), condition=cond.2, body=backward, @K
  ROOT dx = f32[8,8] get-tuple-element(loop.2), index=1
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout, @T TPU's backend config (what makes it a TPU module), @K a loop's trip count."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[8,8]{1,0:T(8,128)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@K", 'backend_config={"known_trip_count":{"n":"3"}}'),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_backward_loop_narrow_of_a_stack_slice_for_a_gather_is_remat_unsure():
    index = find_remat(_parsed(HLO))
    assert ("backward", "h.r") in index
    assert ("backward", "n.r") in index and ("backward", "n.r") in index.weak


def test_a_named_cast_of_the_slice_is_left_to_the_pairing():
    text = HLO.replace("n.r = bf16[2,8] convert(b.r)",
                       'n.r = bf16[2,8] convert(b.r), metadata={op_name="@B/while/body/convert_element_type"}')
    index = find_remat(_parsed(text))
    assert ("backward", "n.r") not in index or ("backward", "n.r") not in index.weak


def test_a_narrow_read_by_no_gather_is_left_alone():
    text = HLO.replace("a.r = bf16[8,8] all-gather(n.r), dimensions={0}, replica_groups={{0,1,2,3}}",
                       "a.r = bf16[8,8] concatenate(n.r, n.r, n.r, n.r), dimensions={0}")
    assert ("backward", "n.r") not in find_remat(_parsed(text))


def test_a_narrow_in_the_forward_loop_is_left_alone():
    text = HLO.replace("b = f32[2,8] bitcast(sl)\n  a = f32[8,8] all-gather(b)",
                       "b = f32[2,8] bitcast(sl)\n  nb = bf16[2,8] convert(b)\n  a = bf16[8,8] all-gather(nb)")
    text = text.replace("h = f32[8,8] dot(x.1, a)", "xb = bf16[8,8] convert(x.1)\n  h = f32[8,8] dot(xb, a)")
    assert "nb = bf16" in text and ("forward", "nb") not in find_remat(_parsed(text))
