"""A recompute's packing of loop-invariant pieces in a scan's backward loop body is remat
(analysis/hloflops/remat/loop_invariant_packings.py).

Unseen TPU draw utpu 229 (linen loop of bidirectional LSTMs, save_only_these_names): the cell's
recompute concatenates its gates' narrowed weights, loop state its backward loop body hands back
unchanged, packed (`-inf` pads, widens, maximums, a narrow) once per matmul reading it, on every
trip; the program without remat hoists the concatenation out of its loops. Half of the packings
were model FLOPs (convert -5,308,416, the truth 85,090,304 over the high end 81,487,360)."""

from __future__ import annotations

import hloparse
from hloflops.remat.by_platform import Decided
from hloflops.remat.loop_invariant_packings import loop_invariant_packings
from hloflops.remat.sites import SiteOp

_NAME = ("jit(loss)/transpose(jvp(Tagger))/backward/while/body/closed_call/checkpoint/rematted_computation/"
         "cell/concatenate")
_T = "{1,0:T(8,128)(2,1)}"

HLO = """HloModule packing, is_scheduled=true, entry_computation_layout={(bf16[8,4]@T, bf16[8,4]@T, s32[])->bf16[8,4]@T}

packing {
  a = bf16[8,4] parameter(0)
  b = bf16[8,4] parameter(1)
  inf = f32[] constant(-inf)
  pa = bf16[8,8] pad(a, inf), padding=0_0x0_4, metadata={op_name="@N"}
  pb = bf16[8,8] pad(b, inf), padding=0_0x4_0, metadata={op_name="@N"}
  wa = f32[8,8] convert(pa)
  wb = f32[8,8] convert(pb)
  m = f32[8,8] maximum(wa, wb), metadata={op_name="@N"}
  ROOT n = bf16[8,8] convert(m)
}

matmul {
  x = bf16[8,4] parameter(0)
  y = bf16[8,4] parameter(1)
  c = bf16[8,4] parameter(2)
  p = bf16[8,8] fusion(x, y), kind=kLoop, calls=packing, metadata={op_name="@N"}
  ROOT d = f32[8,4] convolution(p, c), dim_labels=bf_io->bf,
    metadata={op_name="jit(loss)/transpose(jvp(Tagger))/dot_general"}
}

body {
  s = (s32[], bf16[8,4], bf16[8,4], bf16[8,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  w0 = bf16[8,4] get-tuple-element(s), index=1
  w1 = bf16[8,4] get-tuple-element(s), index=2
  h = bf16[8,4] get-tuple-element(s), index=3
  one = s32[] constant(1)
  j = s32[] add(i, one)
  g = f32[8,4] fusion(w0, @SECOND, h), kind=kOutput, calls=matmul, backend_config={"scoped_memory_configs":[]}
  gn = bf16[8,4] convert(g)
  ROOT t = (s32[], bf16[8,4], bf16[8,4], bf16[8,4]) tuple(j, w0, w1, gn)
}

cond {
  s = (s32[], bf16[8,4], bf16[8,4], bf16[8,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(16)
  ROOT lt = pred[] compare(i, k), direction=LT
}

ENTRY main {
  w0 = bf16[8,4] parameter(0)
  w1 = bf16[8,4] parameter(1)
  z = s32[] parameter(2)
  s0 = (s32[], bf16[8,4], bf16[8,4], bf16[8,4]) tuple(z, w0, w1, w0)
  l = (s32[], bf16[8,4], bf16[8,4], bf16[8,4]) while(s0), condition=cond, body=body
  ROOT r = bf16[8,4] get-tuple-element(l), index=3
}
"""


def _counted(second: str) -> set[str]:
    module = hloparse.parse(HLO.replace("@N", _NAME).replace("@T", _T).replace("@SECOND", second))
    body = module.by_name["packing"]
    ops = [SiteOp((body.name, inst.name, 0), inst, inst.metadata.get("op_name", ""),
                  bool(inst.metadata.get("op_name")), bool(inst.metadata.get("op_name")), i, None, None, "body")
           for i, inst in enumerate(body.instructions) if inst.opcode in ("pad", "convert", "maximum")]
    decided = Decided(set(), set(), set(), set())
    loop_invariant_packings(module, ops, decided)
    return {key[1] for key in decided.remat}


def test_a_recomputed_packing_of_loop_invariant_weights_is_remat():
    assert _counted("w1") == {"pa", "pb", "wa", "wb", "m", "n"}


def test_a_packing_of_a_piece_the_loop_changes_is_left_to_the_other_rules():
    # `h` is the carry: the body hands back its matmul's output in its place
    assert _counted("h") == set()
