"""A function lowered once and called from several call sites is named at each site by that
site's calls (analysis/hloflops/remat/names.py `site_names`). Before optimization a nested
remat conv net (`nn.remat` of a stack of `nn.remat` blocks, the `more` family's
`linen_nested conv`) lowers its relu once for the recompute and calls it three times: the outer
checkpoint's recompute of block_0, and the inner checkpoint's recomputes of block_0 and block_1.
Its ops are named relative to the function (`max`); named with the first site's calls only,
block_0's two recomputes looked like two copies of one op under one name, and one copy per name
is what a recompute adds (the rest are the linearization's), so the instruction was not remat
at every site and none of it counted (maximum -12,288 in the form's named test, more draws 10,
16, 38, ...).

The module below is that module reduced to its relu: the forward calls its own function at two
sites, the recompute reads the forward's inputs through optimization barriers.
"""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import OpNames, find_remat
from hloflops.remat.names import site_names
from hloflops.remat.values import numbered

FORWARD = "jit(loss)/jvp(Net)/stack/checkpoint"
RECOMPUTE = "jit(loss)/transpose(jvp(Net))/jvp(Net)/checkpoint"
OUTER_0 = f"{RECOMPUTE}/rematted_computation/stack/block_0/jit(relu)"
INNER_0 = f"{RECOMPUTE}/stack/checkpoint/rematted_computation/block_0/jit(relu)"
INNER_1 = f"{RECOMPUTE}/stack/checkpoint/rematted_computation/block_1/jit(relu)"

NESTED = f"""HloModule nested_relu

relu_f {{
  a = f32[64]{{0}} parameter(0)
  zero = f32[] constant(0)
  zeros = f32[64]{{0}} broadcast(zero), dimensions={{}}, metadata={{op_name="max"}}
  ROOT max = f32[64]{{0}} maximum(a, zeros), metadata={{op_name="max"}}
}}

relu_r {{
  a = f32[64]{{0}} parameter(0)
  zero = f32[] constant(0)
  zeros = f32[64]{{0}} broadcast(zero), dimensions={{}}, metadata={{op_name="max"}}
  ROOT max = f32[64]{{0}} maximum(a, zeros), metadata={{op_name="max"}}
}}

ENTRY main {{
  x0 = f32[64]{{0}} parameter(0)
  x1 = f32[64]{{0}} parameter(1)
  f0 = f32[64]{{0}} call(x0), to_apply=relu_f, metadata={{op_name="{FORWARD}/block_0/jit(relu)"}}
  f1 = f32[64]{{0}} call(x1), to_apply=relu_f, metadata={{op_name="{FORWARD}/block_1/jit(relu)"}}
  t = (f32[64]{{0}}, f32[64]{{0}}) tuple(x0, x1)
  outer = (f32[64]{{0}}, f32[64]{{0}}) opt-barrier(t)
  o0 = f32[64]{{0}} get-tuple-element(outer), index=0
  o1 = f32[64]{{0}} get-tuple-element(outer), index=1
  r0 = f32[64]{{0}} call(o0), to_apply=relu_r, metadata={{op_name="{OUTER_0}"}}
  u = (f32[64]{{0}}, f32[64]{{0}}) tuple(o0, o1)
  inner = (f32[64]{{0}}, f32[64]{{0}}) opt-barrier(u)
  i0 = f32[64]{{0}} get-tuple-element(inner), index=0
  i1 = f32[64]{{0}} get-tuple-element(inner), index=1
  r1 = f32[64]{{0}} call(i0), to_apply=relu_r, metadata={{op_name="{INNER_0}"}}
  r2 = f32[64]{{0}} call(i1), to_apply=relu_r, metadata={{op_name="{INNER_1}"}}
  ROOT out = (f32[64]{{0}}, f32[64]{{0}}, f32[64]{{0}}, f32[64]{{0}}, f32[64]{{0}}) tuple(f0, f1, r0, r1, r2)
}}
"""


def test_a_callee_is_named_at_each_call_site_by_that_sites_calls():
    module = hloparse.parse(NESTED)
    numbers = numbered(module)
    comp = module.by_name["relu_r"]
    op_names = OpNames(module)
    names = [site_names(module, op_names, comp, chain, {})[-1] for chain in numbers.chains["relu_r"]]
    assert names == [f"{OUTER_0}/max", f"{INNER_0}/max", f"{INNER_1}/max"]


def test_the_outer_and_the_inner_recompute_of_one_layer_in_one_callee_are_both_remat():
    module = hloparse.parse(NESTED)
    index = find_remat(module)
    assert ("relu_r", "max") in index
    assert ("relu_f", "max") not in index
    # three recomputes of 64 elements each; the forward's two are model FLOPs
    assert account(module, xla={"flops": 0.0}).remat_flops == 3 * 64
