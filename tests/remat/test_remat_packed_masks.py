"""A recomputed relu mask TPU packs into bits in a scan's backward loop body, and its unpacks, are
remat (analysis/hloflops/remat/packed_masks.py). The program without remat stacks the mask from its
forward loop as `pred` and packs nothing; with remat the recompute hands the mask to the trip's
gradient fusions packed (held-out TPU 109: shift-left -1,605,632, and -1,204,224, reduce -286,736
after optimization before the rule; in range after). Outside a loop both programs pack the mask
they hand from forward to backward (held-out TPU 60)."""

from __future__ import annotations

import hloparse
from hloflops.remat.by_platform import Decided
from hloflops.remat.packed_masks import packed_masks
from hloflops.remat.sites import SiteOp

_T = "{2,1,0:T(8,128)}"
HLO = """HloModule masks, is_scheduled=true, entry_computation_layout={(f32[2,8,4]@T)->f32[2,8,4]@T}

or_bits {
  lhs = u32[] parameter(0)
  rhs = u32[] parameter(1)
  ROOT o = u32[] or(lhs, rhs)
}

pack {
  x = f32[2,8,4]@T parameter(0)
  z = f32[] constant(0)
  zb = f32[2,8,4]@T broadcast(z), dimensions={}
  gt = pred[2,8,4]@T compare(x, zb), direction=GT, metadata={op_name="@NAME"}
  w = u32[2,8,4]@T convert(gt)
  i = u32[2,8,4]@T iota(), iota_dimension=0
  s = u32[2,8,4]@T shift-left(w, i)
  c0 = u32[] constant(0)
  ROOT r = u32[8,4]{1,0:T(8,128)} reduce(s, c0), dimensions={0}, to_apply=or_bits
}

unpack {
  p = u32[8,4]{1,0:T(8,128)} parameter(0)
  g = f32[2,8,4]@T parameter(1)
  one = u32[] constant(1)
  ob = u32[2,8,4]@T broadcast(one), dimensions={}
  i = u32[2,8,4]@T iota(), iota_dimension=0
  bit = u32[2,8,4]@T shift-left(ob, i)
  pb = u32[2,8,4]@T broadcast(p), dimensions={1,2}
  a = u32[2,8,4]@T and(bit, pb)
  m = pred[2,8,4]@T convert(a)
  z = f32[] constant(0)
  zb = f32[2,8,4]@T broadcast(z), dimensions={}
  ROOT sel = f32[2,8,4]@T select(m, g, zb)
}

body {
  st = (s32[], f32[2,8,4]@T) parameter(0)
  n = s32[] get-tuple-element(st), index=0
  x = f32[2,8,4]@T get-tuple-element(st), index=1
  packed = u32[8,4]{1,0:T(8,128)} fusion(x), kind=kLoop, calls=pack, backend_config={"scoped_memory_configs":[]}
  grad = f32[2,8,4]@T fusion(packed, x), kind=kLoop, calls=unpack
  one = s32[] constant(1)
  n1 = s32[] add(n, one)
  ROOT out = (s32[], f32[2,8,4]@T) tuple(n1, grad)
}

cond {
  st = (s32[], f32[2,8,4]@T) parameter(0)
  n = s32[] get-tuple-element(st), index=0
  k = s32[] constant(2)
  ROOT lt = pred[] compare(n, k), direction=LT
}

ENTRY main {
  x0 = f32[2,8,4]@T parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[2,8,4]@T) tuple(zero, x0)
  loop = (s32[], f32[2,8,4]@T) while(init), condition=cond, body=body,
    metadata={op_name="jit(loss)/transpose(jvp(Net))/while"}
  ROOT y = f32[2,8,4]@T get-tuple-element(loop), index=1
}
"""
_RECOMPUTE = "jit(loss)/transpose(jvp(Net))/while/body/checkpoint/rematted_computation/gt"


def _counted(name: str = _RECOMPUTE, frame: str = "body") -> set[str]:
    module = hloparse.parse(HLO.replace("@T", _T).replace("@NAME", name))
    ops = [SiteOp((comp, inst.name, 0), inst, inst.op_name, inst.name == "gt" and "rematted" in name,
                  inst.name == "gt" and "rematted" in name, i, None, None, frame)
           for comp in ("pack", "unpack") for i, inst in enumerate(module.by_name[comp].instructions)]
    decided = Decided(set(), set(), set(), set())
    packed_masks(module, ops, decided)
    return {f"{key[0]}.{key[1]}" for key in decided.remat}


def test_a_recomputed_mask_packed_in_a_backward_loop_is_remat_with_its_unpacks():
    assert _counted() == {"pack.w", "pack.s", "pack.r", "unpack.pb", "unpack.bit", "unpack.a", "unpack.m"}


def test_a_forward_mask_packed_is_left_to_the_other_rules():
    assert _counted("jit(loss)/transpose(jvp(Net))/while/body/gt") == set()


def test_a_mask_packed_outside_a_loop_is_left_to_the_other_rules():
    assert _counted(frame="main") == set()
