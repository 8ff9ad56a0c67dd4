"""Host offload: a custom-call that moves a value between memories is that value
(analysis/hloflops/remat/op_kinds.py `is_memory_placement`). The offload policies
(`save_and_offload_only_these_names`, `offload_dot_with_no_batch_dims`) put the saved residual on
the host in the forward (`annotate_device_placement` to `pinned_host`) and bring it back in the
recompute (`annotate_device_placement` to `device`; `MoveToHost` / `MoveToDevice` elsewhere).
jax marks the placement a side effect, so it was numbered as a value of its own, and the
recompute's ops reading it matched nothing: before optimization the TPU draw 4
(`nnx_loop offload tpu:single`) missed the recompute's bias add (add -512). The placement itself
computes nothing again and never pairs.

The module below is that draw's layer reduced to the offloaded dot and the add that reads it back.
"""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat
from hloflops.remat.values import value_numbers
from tests.remat.judge import by_opcode

FORWARD = "jit(loss)/jvp()"
RECOMPUTE = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation"


def _module(target: str) -> str:
    place = f'custom_call_target="{target}", custom_call_has_side_effect=true'
    return f"""HloModule offloaded

ENTRY main {{
  x = f32[8,64]{{1,0}} parameter(0)
  w = f32[64,64]{{1,0}} parameter(1)
  b = f32[8,64]{{1,0}} parameter(2)
  dot = f32[8,64]{{1,0}} dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{FORWARD}/dot_general"}}
  add = f32[8,64]{{1,0}} add(dot, b), metadata={{op_name="{FORWARD}/add"}}
  to_host = f32[8,64]{{1,0}} custom-call(dot), {place},
    frontend_attributes={{_xla_buffer_placement="pinned_host"}}, metadata={{op_name="{FORWARD}/device_put"}}
  saved = (f32[8,64]{{1,0}}, f32[8,64]{{1,0}}) tuple(to_host, b)
  barrier = (f32[8,64]{{1,0}}, f32[8,64]{{1,0}}) opt-barrier(saved)
  host = f32[8,64]{{1,0}} get-tuple-element(barrier), index=0
  bias = f32[8,64]{{1,0}} get-tuple-element(barrier), index=1
  to_device = f32[8,64]{{1,0}} custom-call(host), {place},
    frontend_attributes={{_xla_buffer_placement="device"}}, metadata={{op_name="{RECOMPUTE}/device_put"}}
  recomputed = f32[8,64]{{1,0}} add(to_device, bias), metadata={{op_name="{RECOMPUTE}/add"}}
  ROOT out = (f32[8,64]{{1,0}}, f32[8,64]{{1,0}}) tuple(add, recomputed)
}}
"""


def test_a_value_moved_to_the_host_and_back_is_the_value_moved():
    for target in ("annotate_device_placement", "MoveToHost"):
        values = value_numbers(hloparse.parse(_module(target)))
        exact = {name: values.exact[("main", name)] for name in ("dot", "to_host", "to_device")}
        assert exact["to_host"] == exact["to_device"] == exact["dot"], target


def test_the_recompute_reading_an_offloaded_residual_pairs_with_its_forward():
    module = hloparse.parse(_module("annotate_device_placement"))
    index = find_remat(module)
    assert ("main", "recomputed") in index
    # the move back to the device is remat-named and computes the dot's value, but computes nothing
    assert ("main", "to_device") not in index
    assert ("main", "to_device") not in index.merged
    assert by_opcode(account(module, xla={"flops": 0.0}), remat=True) == {"add": 8 * 64}
