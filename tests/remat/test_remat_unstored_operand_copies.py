"""A recompute nested in a weight gradient's operand, of a value the forward never stores: XLA fused
its producer into every reader (analysis/hloflops/remat/gradient_operand_copies.py).

TPU draw vtpu 265 (linen_whole, FSDP): the last block's output `x + (h @ w2 + b2)`, read from the
window of the FSDP matmul's output by a `dynamic-slice`, feeds the LM head's forward matmul and its
weight gradient. The forward nests it in the head's fusion and hands it out nowhere; the recompute
nests its own copy in the weight gradient's fusion. The program without remat nests a copy of the
forward's value in that same gradient fusion (the head's input read twice, never stored), so the
recompute's copy is model FLOPs there (add +2,048 over-counted, the truth 2,048 under the low
end). Whether the twin nests a copy or has its forward store the value rests on how XLA fused that
program: a `twin_copies` hinge of one on each counted op of the copy. The copy's input is the
recompute's own matmul window, which meets the forward's by no value number, so the forward copy
is found by opcode, shape and frame inputs (hloflops.remat.inputs)."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

_R = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/LM/block"
_F = "jit(loss)/jvp(LM)/block"

_LAYOUT = "{(f32[4,32]{1,0:T(4,128)})->f32[32,16]{0,1:T(8,128)}}"  # a TPU module: tiled layouts

MODULE = """HloModule block_out, is_scheduled=true, entry_computation_layout=@L

fwd_copy {
  a0 = f32[4,32] parameter(0)
  a1 = f32[4,128] parameter(1)
  a2 = s32[] parameter(2)
  a3 = f32[32] parameter(3)
  c0 = s32[] constant(0)
  ds = f32[4,32] dynamic-slice(a1, c0, a2), dynamic_slice_sizes={4,32}, metadata={op_name="@F/Dense_1/dot_general"}
  b = f32[4,32] broadcast(a3), dimensions={1}
  h = f32[4,32] add(ds, b), metadata={op_name="@F/Dense_1/add"}
  ROOT o = f32[4,32] add(a0, h), metadata={op_name="@F/add"}
}

head {
  f0 = f32[4,32] parameter(0)
  f1 = f32[4,128] parameter(1)
  f2 = s32[] parameter(2)
  f3 = f32[32] parameter(3)
  f4 = f32[32,16] parameter(4)
  x = f32[4,32] fusion(f0, f1, f2, f3), kind=kLoop, calls=fwd_copy, metadata={op_name="@F/add"}
  ROOT y = f32[4,16] convolution(x, f4), dim_labels=bf_io->bf, metadata={op_name="@H"}
}

rec_copy {
  r0 = f32[4,32] parameter(0)
  r1 = f32[4,128] parameter(1)
  r2 = s32[] parameter(2)
  r3 = f32[32] parameter(3)
  c0 = s32[] constant(0)
  ds = f32[4,32] dynamic-slice(r1, c0, r2), dynamic_slice_sizes={4,32}, metadata={op_name="@R/Dense_1/dot_general"}
  b = f32[4,32] broadcast(r3), dimensions={1}
  h = f32[4,32] add(ds, b), metadata={op_name="@R/Dense_1/add"}
  ROOT o = f32[4,32] add(r0, h), metadata={op_name="@R/add"}
}

weight_grad {
  g0 = f32[4,32] parameter(0)
  g1 = f32[4,128] parameter(1)
  g2 = s32[] parameter(2)
  g3 = f32[32] parameter(3)
  g4 = f32[4,16] parameter(4)
  x = f32[4,32] fusion(g0, g1, g2, g3), kind=kLoop, calls=rec_copy, metadata={op_name="@R/add"}
  ROOT dw = f32[32,16] convolution(x, g4), dim_labels=fb_io->bf, metadata={op_name="@G"}
}

ENTRY main {
  x0 = f32[4,32] parameter(0)
  hin = f32[4,64] parameter(1)
  w2 = f32[64,128] parameter(2)
  i = s32[] parameter(3)
  b2 = f32[32] parameter(4)
  wh = f32[32,16] parameter(5)
  dy = f32[4,16] parameter(6)
  mf = f32[4,128] dot(hin, w2), @C, metadata={op_name="@F/Dense_1/dot_general"}, @T
  y = f32[4,16] fusion(x0, mf, i, b2, wh), kind=kOutput, calls=head, metadata={op_name="@H"}, @T
  hb = f32[4,64] opt-barrier(hin)
  mr = f32[4,128] dot(hb, w2), @C, metadata={op_name="@R/Dense_1/dot_general"}, @T
  dw = f32[32,16] fusion(x0, mr, i, b2, dy), kind=kOutput, calls=weight_grad, metadata={op_name="@G"}, @T
  @OUT
}
"""

_UNSTORED = "ROOT out = (f32[4,16], f32[32,16]) tuple(y, dw)"
# The forward also hands the block's output out of a fusion of its own: a stored value to read.
_STORED = """s = f32[4,32] fusion(x0, mf, i, b2), kind=kLoop, calls=fwd_copy, metadata={op_name="@F/add"}, @T
  ROOT out = (f32[4,16], f32[32,16], f32[4,32]) tuple(y, dw, s)"""
_RECOMPUTED_READER = ('metadata={op_name="@G"}', 'metadata={op_name="@R/Dense_0/dot_general"}')


def _account(out: str = _UNSTORED, reader: tuple[str, str] = ("", "")):
    text = MODULE.replace("@OUT", out)
    if reader[0]:
        text = text.replace(*reader)
    for short, long in (("@L", _LAYOUT), ("@C", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@H", "jit(loss)/jvp(LM)/Dense_0/dot_general"), ("@R", _R), ("@F", _F),
                        ("@G", "jit(loss)/transpose(jvp(jvp()))/checkpoint/LM/Dense_0/dot_general"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def _copies(acc) -> set:
    return {(h.computation, h.name) for h in acc.remat_hinges if h.twin_copies == 1 and h.computation == "rec_copy"}


def test_copy_of_a_block_output_the_forward_never_stores_is_a_hinge_of_one():
    # The recompute's bias add and residual add, counted, may be the twin's own gradient copy.
    acc = _account()
    assert _copies(acc) == {("rec_copy", "h"), ("rec_copy", "o")}, acc.remat_hinges
    assert acc.remat_flops_bounds[0] <= acc.remat_flops - 256


def test_a_block_output_the_forward_stores_is_not():
    # The forward hands the value out of a fusion: the twin could read it (and the copy reads more
    # than it writes, so the stored rule's `may_duplicate` leaves it too).
    acc = _account(_STORED)
    assert not _copies(acc), acc.remat_hinges


def test_a_copy_read_by_a_recomputed_matmul_is_not():
    # The nested copy feeds the recompute's own matmul, which the twin never runs: remat.
    acc = _account(reader=_RECOMPUTED_READER)
    assert not _copies(acc), acc.remat_hinges
