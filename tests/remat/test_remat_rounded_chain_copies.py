"""Copies of one recomputed value that TPU computes, in a scan's backward loop, from an f32 value in
one fusion and from that fusion's bf16 rounding of it in another, are one value's copies
(analysis/hloflops/remat/rounded_chain_copies.py, called by backward_loop_copies.py).

TPU draw 29 (linen_remat_scan lm, bf16, tensor parallel): the gradient's fusion computes the bias add
`h` in f32 and gelu's chain from it; it hands out `h` rounded to bf16, and the fusion feeding the
next matmul's weight gradient computes gelu's chain again from that copy. Jax computes `h` once, in
bf16: TPU computes its ops in f32 and, allowed excess precision, drops the narrow-and-widen pair
inside a fusion but not across one, so the two chains got different value numbers, each taken for
the program without remat's saving copy, and neither counted (multiply -40,960, add -24,448).
A widen jax asked for (a named convert) is a value of its own: its chain is not joined."""

from __future__ import annotations

from itertools import count

import hloparse
from hloflops.remat.rounded_chain_copies import join_rounded
from hloflops.remat.sites import SiteOp

RECOMPUTE = "jit(loss)/transpose(jvp(LM))/decoder/while/body/closed_call/checkpoint/rematted_computation/mlp"

HLO = """HloModule rounded

fa {
  p0 = bf16[8] parameter(0)
  p1 = bf16[8] parameter(1)
  c0 = f32[8] convert(p0)
  c1 = f32[8] convert(p1)
  h = f32[8] add(c0, c1), metadata={op_name="@R/add"}
  sq = f32[8] multiply(h, h), metadata={op_name="@R/integer_pow"}
  n0 = bf16[8] convert(sq)
  n1 = bf16[8] convert(h)
  ROOT t = (bf16[8], bf16[8]) tuple(n0, n1)
}

fb {
  q = bf16[8] parameter(0)
  w = f32[8] convert(q)@WIDEN
  sq2 = f32[8] multiply(w, w), metadata={op_name="@R/integer_pow"}
  ROOT n = bf16[8] convert(sq2)
}

ENTRY main {
  a = bf16[8] parameter(0)
  b = bf16[8] parameter(1)
  f = (bf16[8], bf16[8]) fusion(a, b), kind=kLoop, calls=fa
  g0 = bf16[8] get-tuple-element(f), index=0
  g1 = bf16[8] get-tuple-element(f), index=1
  r = bf16[8] fusion(g1), kind=kLoop, calls=fb
  ROOT out = (bf16[8], bf16[8]) tuple(g0, r)
}
"""


def _groups(widen: str) -> dict:
    module = hloparse.parse(HLO.replace("@WIDEN", widen).replace("@R", RECOMPUTE))
    order, ops = count(), []
    for comp in (module.by_name["fa"], module.by_name["fb"]):
        for inst in comp.instructions:
            if inst.opcode in ("parameter", "tuple"):
                continue
            op_name = inst.metadata.get("op_name", "")
            number = next(order)  # every op a value of its own, as value numbering tells them apart
            ops.append(SiteOp((comp.name, inst.name, 0), inst, op_name, bool(op_name), bool(op_name), number,
                              number, number, "body"))
    groups = {("body", op.exact, True): [op] for op in ops if op.named and op.inst.opcode == "multiply"}
    join_rounded(module, groups, {op.key: op for op in ops})
    return {key: [op.inst.name for op in members] for key, members in groups.items()}


def test_a_chain_from_tpu_s_rounding_of_a_value_joins_the_chain_from_the_value():
    assert sorted(_groups("").values()) == [["sq", "sq2"]]


def test_a_chain_from_jax_s_own_widen_is_a_value_of_its_own():
    named = ', metadata={op_name="jit(loss)/transpose(jvp(LM))/convert_element_type"}'
    assert sorted(_groups(named).values()) == [["sq"], ["sq2"]]
