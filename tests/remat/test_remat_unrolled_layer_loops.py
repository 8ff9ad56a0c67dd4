"""A layer loop XLA unrolled whose twin may keep it (analysis/hloflops/remat/unrolled_layer_loops.py).
Held-out TPU 206 (nnx_scan, offload policy, tp) and 232 (hk_layer_stack, offload, tp): the program
with remat unrolled its two-layer scans (each layer's `dynamic_slice` of a weight stack a static,
narrowing `slice`; backward ops named `transpose(jvp())/while/body/...` outside any layer loop) and
pruned layer 0's dead input gradient; the twin kept its loops, running that matmul on every trip and
narrowing each whole weight stack before its loop: truth -127,712 and -5,149, below bounds [-64, 2,048]
and [960, 2,048]. Nothing here says the twin did not unroll alike, so the surviving input-gradient
matmul and the stacks' narrows lower the range's low end only, never the split. A small hand-written
module: a stack of two layers' weights sliced into bf16, one matmul per layer, its backward pair
(input gradient, weight gradient) per layer less layer 0's input gradient."""

from __future__ import annotations

import hloparse
from hloflops.remat.unrolled_layer_loops import pruned_input_gradients, unrolled_stack_slices

_FWD = "jit(loss)/jvp()/while/body/closed_call/dot_general"
_BWD = "jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/dot_general"
_SLICE = "jit(loss)/jvp()/while/body/jit(dynamic_index_in_dim)/dynamic_slice"


def _module(narrow: str = "bf16", dx0: bool = False) -> str:
    first = (f'  %dx0 = f32[4,8]{{1,0}} dot(%g0, %w0), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}, '
             f'metadata={{op_name="{_BWD}"}}\n') if dx0 else ""
    return f"""HloModule m, is_scheduled=true

%layers (p: f32[2,8,8]) -> ({narrow}[8,8], {narrow}[8,8]) {{
  %p = f32[2,8,8]{{2,1,0}} parameter(0)
  %s0 = {narrow}[1,8,8]{{2,1,0}} slice(%p), slice={{[0:1], [0:8], [0:8]}}, metadata={{op_name="{_SLICE}"}}
  %s1 = {narrow}[1,8,8]{{2,1,0}} slice(%p), slice={{[1:2], [0:8], [0:8]}}, metadata={{op_name="{_SLICE}"}}
  %b0 = {narrow}[8,8]{{1,0}} bitcast(%s0)
  %b1 = {narrow}[8,8]{{1,0}} bitcast(%s1)
  ROOT %t = ({narrow}[8,8]{{1,0}}, {narrow}[8,8]{{1,0}}) tuple(%b0, %b1)
}}

ENTRY %main (w: f32[2,8,8], x: f32[4,8]) -> f32[8,8] {{
  %w = f32[2,8,8]{{2,1,0}} parameter(0)
  %x = f32[4,8]{{1,0}} parameter(1)
  %f = ({narrow}[8,8]{{1,0}}, {narrow}[8,8]{{1,0}}) fusion(%w), kind=kLoop, calls=%layers
  %w0 = {narrow}[8,8]{{1,0}} get-tuple-element(%f), index=0
  %w1 = {narrow}[8,8]{{1,0}} get-tuple-element(%f), index=1
  %h0 = f32[4,8]{{1,0}} dot(%x, %w0), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{_FWD}"}}
  %h1 = f32[4,8]{{1,0}} dot(%h0, %w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{_FWD}"}}
  %g0 = f32[4,8]{{1,0}} dot(%h1, %w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}},
    metadata={{op_name="{_BWD}"}}
  %dw1 = f32[8,8]{{1,0}} dot(%h0, %h1), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{_BWD}"}}
  %dw0 = f32[8,8]{{1,0}} dot(%x, %g0), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{_BWD}"}}
{first}  ROOT %sum = f32[8,8]{{1,0}} add(%dw0, %dw1)
}}
"""


def test_an_unrolled_stacks_narrowing_slices_are_the_twins_stack_narrow():
    found, layers = unrolled_stack_slices(hloparse.parse(_module()))
    assert layers == 2
    assert found == {("layers", "s0"): 1, ("layers", "s1"): 1}, found


def test_slices_that_keep_the_type_narrow_nothing():
    found, layers = unrolled_stack_slices(hloparse.parse(_module("f32")))
    assert (found, layers) == ({}, 2)


def test_the_surviving_input_gradient_hinges_where_layer_0s_was_pruned():
    module = hloparse.parse(_module())
    assert pruned_input_gradients(module, 2) == {("main", "g0")}


def test_no_pruned_input_gradient_no_hinge():
    # Every layer's input gradient present (the twin's count): nothing one layer short.
    module = hloparse.parse(_module(dx0=True))
    assert pruned_input_gradients(module, 2) == set()
    assert pruned_input_gradients(module, 0) == set()
