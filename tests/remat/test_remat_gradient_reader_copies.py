"""A cheap forward chain the forward only copies into its matmuls, which the recompute stores for
the gradient matmuls: the program without remat copies it into each weight's gradient as well
(analysis/hloflops/remat/gradient_reader_copies.py). TPU draw htpu 116 (python_loop tp,
nothing_saveable): layer norm's `(x - mean) * rstd` sits in the query, key and value projections'
fusions; the weights' gradients read the recompute's stored bf16 copy. The twin copies the chain
into its three weight gradients (`x - mean` 7 times against this forward's 4), the truth under the
range's low end before. Small hand-written fusions."""

from __future__ import annotations

import hloparse
from hloflops.remat.gradient_reader_copies import gradient_reader_copies

_FORWARD = "jit(loss)/jvp()"
_RECOMPUTE = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation"
_GRADIENT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/btd,dhk->bthk/dot_general"


def _module(gradient: bool = True, recompute: bool = True, expensive: bool = False) -> str:
    reader = _GRADIENT if gradient else f"{_RECOMPUTE}/dot_general"
    rec = _RECOMPUTE if recompute else _FORWARD
    scale = "rsqrt(%d)" if expensive else "multiply(%d, %p1)"
    return f"""HloModule m, is_scheduled=true

%norm (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name="{_FORWARD}/sub"}}
  ROOT %s = f32[2,8]{{1,0}} {scale}, metadata={{op_name="{_FORWARD}/mul"}}
}}

%proj (a0: f32[2,8], a1: f32[2,8], w: f32[8,4]) -> f32[2,4] {{
  %a0 = f32[2,8]{{1,0}} parameter(0)
  %a1 = f32[2,8]{{1,0}} parameter(1)
  %w = f32[8,4]{{1,0}} parameter(2)
  %n = f32[2,8]{{1,0}} fusion(%a0, %a1), kind=kLoop, calls=%norm, metadata={{op_name="{_FORWARD}/mul"}}
  ROOT %c = f32[2,4]{{1,0}} dot(%n, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{_FORWARD}/dot_general"}}
}}

%stored (r0: f32[2,4], r1: f32[2,4]) -> bf16[2,4] {{
  %r0 = f32[2,4]{{1,0}} parameter(0)
  %r1 = f32[2,4]{{1,0}} parameter(1)
  %e = f32[2,4]{{1,0}} subtract(%r0, %r1), metadata={{op_name="{rec}/sub"}}
  %f = f32[2,4]{{1,0}} multiply(%e, %r1), metadata={{op_name="{rec}/mul"}}
  ROOT %g = bf16[2,4]{{1,0}} convert(%f)
}}

%grad (b0: bf16[2,8], b1: bf16[2,4]) -> bf16[8,4] {{
  %b0 = bf16[2,8]{{1,0}} parameter(0)
  %b1 = bf16[2,4]{{1,0}} parameter(1)
  ROOT %h = bf16[8,4]{{1,0}} dot(%b0, %b1), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{reader}"}}
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8], x2: f32[8,4], x3: f32[2,4], x4: f32[2,4], x5: bf16[2,4]) -> bf16[8,4] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %x2 = f32[8,4]{{1,0}} parameter(2)
  %x3 = f32[2,4]{{1,0}} parameter(3)
  %x4 = f32[2,4]{{1,0}} parameter(4)
  %x5 = bf16[2,4]{{1,0}} parameter(5)
  %y = f32[2,4]{{1,0}} fusion(%x0, %x1, %x2), kind=kOutput, calls=%proj, metadata={{op_name="{_FORWARD}/dot_general"}}
  %v = bf16[2,4]{{1,0}} fusion(%x3, %x4), kind=kLoop, calls=%stored, metadata={{op_name="{rec}/mul"}}
  %ag = bf16[2,8]{{1,0}} all-gather(%v), channel_id=1, replica_groups={{{{0,1}}}}, dimensions={{1}}
  ROOT %dw = bf16[8,4]{{1,0}} fusion(%ag, %x5), kind=kOutput, calls=%grad, metadata={{op_name="{reader}"}}
}}
"""


def test_forward_copy_in_a_matmul_stands_for_a_copy_in_its_gradient():
    # The recompute stores `(x - mean) * rstd` for a weight's gradient (through an all-gather); the
    # forward copies it into its projection: the twin's gradient may copy it once more.
    found = gradient_reader_copies(hloparse.parse(_module()))
    assert found == {("norm", "d"): 1, ("norm", "s"): 1}, found


def test_stored_for_the_recompute_only_is_not():
    # Only the recompute's own matmul reads the stored value: the twin has no such reader.
    assert gradient_reader_copies(hloparse.parse(_module(gradient=False))) == {}


def test_value_the_forward_stores_is_not():
    # The stored chain is the forward's own (no recompute name): both programs read it stored.
    assert gradient_reader_copies(hloparse.parse(_module(recompute=False))) == {}


def test_chain_with_an_expensive_op_is_never_copied():
    # XLA copies no expensive op (rsqrt) into a consumer, with remat or without.
    assert gradient_reader_copies(hloparse.parse(_module(expensive=True))) == {}
