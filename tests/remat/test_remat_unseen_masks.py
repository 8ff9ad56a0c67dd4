"""A residual whose chain reads the input of a mask only the backward computes
(analysis/hloflops/remat/unseen_masks.py). With remat, a scan's backward loop recomputes relu's
preactivation `x`, computes the mask `x > 0` from it and hands `x` out narrowed; a weight
gradient's fusion widens it back and takes `max(x, 0)`. The program without remat computes the
mask in its forward from the same `x`, and may compute relu again beside it to stack relu's output
(held-out TPU 109, 127: maximum and convert +401,408 / +65,536 before, counted remat on the premise
that it saves the forward's narrowed hand-out as TPU draws 10 and 49 do; a hinge, exact, after).
The mask is the sign this program shows; a layer norm's output (draws 10, 49) reads no mask's
input, and a mask the forward computes itself is no sign (the forward already saves it)."""

from __future__ import annotations

import hloparse
from hloflops.remat.sites import SiteOp, one_call_site
from hloflops.remat.unseen_masks import UnseenMasks

_T = "{2,1,0:T(8,128)}"
_REMAT = "jvp/checkpoint/rematted_computation/block/"
HLO = """HloModule masks, is_scheduled=true, entry_computation_layout={(f32[2,8,4]@T, f32[2,8,4]@T)->f32[2,8,4]@T}

recompute {
  c = f32[2,8,4]@T parameter(0)
  b = f32[2,8,4]@T parameter(1)
  x = f32[2,8,4]@T add(c, b), metadata={op_name="@Radd"}
  z = f32[] constant(0)
  zb = f32[2,8,4]@T broadcast(z), dimensions={}
  gt = pred[2,8,4]@T compare(x, zb), direction=GT, metadata={op_name="@Rgt"}
  xn = bf16[2,8,4]@T convert(x)
  ROOT t = (pred[2,8,4]@T, bf16[2,8,4]@T) tuple(gt, xn)
}

relu {
  p = bf16[2,8,4]@T parameter(0)
  q = f32[2,8,4]@T parameter(1)
  w = f32[2,8,4]@T convert(p)
  z = f32[] constant(0)
  zb = f32[2,8,4]@T broadcast(z), dimensions={}
  mx = f32[2,8,4]@T maximum(w, zb), metadata={op_name="@Rjit(relu)/max"}
  other = f32[2,8,4]@T maximum(q, zb), metadata={op_name="@Rjit(relu)/max"}
  ROOT s = f32[2,8,4]@T add(mx, other)
}

ENTRY main {
  a0 = f32[2,8,4]@T parameter(0)
  a1 = f32[2,8,4]@T parameter(1)
  f = (pred[2,8,4]@T, bf16[2,8,4]@T) fusion(a0, a1), kind=kLoop, calls=recompute
  xn = bf16[2,8,4]@T get-tuple-element(f), index=1
  ROOT g = f32[2,8,4]@T fusion(xn, a1), kind=kLoop, calls=relu
}
"""


def _masks(forward_computes_the_mask: bool = False, text: str = HLO):
    module = hloparse.parse(text.replace("@T", _T).replace("@R", _REMAT))
    ops = [SiteOp((comp, inst.name, 0), inst, inst.op_name, bool(inst.op_name), bool(inst.op_name), i, None, None,
                  "main") for comp in ("recompute", "relu") for i, inst in enumerate(module.by_name[comp].instructions)]
    by_key = {op.key: op for op in ops}
    masks = UnseenMasks(module, one_call_site(module), by_key, ops, {"main"}, lambda op: forward_computes_the_mask)
    return masks, by_key


def test_relu_of_the_masks_input_widened_back_shares_it():
    masks, by_key = _masks()
    assert masks.shares_input(by_key[("relu", "mx", 0)])


def test_relu_of_another_value_shares_nothing():
    masks, by_key = _masks()
    assert not masks.shares_input(by_key[("relu", "other", 0)])


def test_a_mask_the_forward_computes_is_no_sign():
    masks, by_key = _masks(forward_computes_the_mask=True)
    assert not masks.shares_input(by_key[("relu", "mx", 0)])


def test_a_hinged_copys_own_narrow_joins_the_hinge():
    # ntpu 153: relu's `max(x, 0)` narrowed to bf16 for a matmul in the same fusion; the twin narrows
    # where it computes relu, so the narrow runs exactly when the hinged copy does.
    text = HLO.replace("  ROOT s = f32[2,8,4]@T add(mx, other)",
                       "  mn = bf16[2,8,4]@T convert(mx)\n  mw = f32[2,8,4]@T convert(mn)\n"
                       "  ROOT s = f32[2,8,4]@T add(mw, other)")
    masks, by_key = _masks(text=text)
    mx = by_key[("relu", "mx", 0)].key
    masks.hinged.add(mx)
    assert masks.narrows({mx}) == {("relu", "mn", 0)}
    assert masks.narrows(set()) == set()  # no longer unsure: nothing follows
