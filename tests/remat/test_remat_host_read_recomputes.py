"""A recompute's matmul computed from a residual the program offloaded to the host
(hloflops.remat.host_read_recomputes).

Hand-written after TPU draw 75 (haiku's layer_stack under `save_and_offload_only_these_names`,
tensor parallelism): the second layer's recomputed projections read the residual the forward sent
to the host, computed from more frame inputs than their forward's operands, so the pairing by
signature, which asks the same inputs in one frame, left them unpaired (convolution -2,621,440
after optimization, in the range only as hinges). Reading a value only the backward reads back,
the recompute cannot be one CSE merged into its forward: it pairs with the forward twin left over.
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

FWD = "jit(loss)/jvp()/while/body/closed_call/multi_head_attention/key/dot_general"
REMAT = ("jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/rematted_computation/"
         "multi_head_attention/key/dot_general")
TPU = 'backend_config={"scoped_memory_configs":[]}'
LAYOUT = "{(f32[4,16]{1,0:T(8,128)})->f32[4,32]{1,0:T(8,128)}}"
DIMS = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


def _module(through_host: bool = True, twin: bool = True) -> hloparse.Module:
    back = "yh = f32[4,16]{1,0:S(5)} copy(y)\n  yb = f32[4,16]{1,0} copy(yh)" if through_host else \
        "yb = f32[4,16]{1,0} copy(y)"
    forward = f'metadata={{op_name="{FWD}"}}' if twin else 'metadata={op_name="jit(loss)/jvp()/other/dot_general"}'
    return hloparse.parse(f"""HloModule m, is_scheduled=true, entry_computation_layout={LAYOUT}

ENTRY main {{
  x = f32[4,16]{{1,0}} parameter(0), {TPU}
  z = f32[4,16]{{1,0}} parameter(1)
  w = f32[16,32]{{1,0}} parameter(2)
  d = f32[4,32]{{1,0}} dot(x, w), {DIMS}, {forward}
  y = f32[4,16]{{1,0}} add(x, z), metadata={{op_name="jit(loss)/jvp()/while/body/closed_call/add"}}
  {back}
  r = f32[4,32]{{1,0}} dot(yb, w), {DIMS}, metadata={{op_name="{REMAT}"}}
  ROOT out = (f32[4,32]{{1,0}}, f32[4,32]{{1,0}}) tuple(d, r)
}}
""")


def test_a_recompute_reading_an_offloaded_residual_pairs_with_a_forward_twin_left_over():
    assert ("main", "r") in find_remat(_module()).remat


def test_only_through_the_host_and_only_with_a_twin_of_its_name():
    assert ("main", "r") not in find_remat(_module(through_host=False)).remat
    assert ("main", "r") not in find_remat(_module(twin=False)).remat
