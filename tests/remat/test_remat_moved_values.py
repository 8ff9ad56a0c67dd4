"""Moves on the device (issue 28, round 11; hloflops.remat.moved_values). TPU prefetches a weight
into another memory space (`copy-start` / `copy-done`) and gathers an FSDP-sharded one with an
asynchronous collective (`AsyncCollectiveStart` / `AsyncCollectiveDone` fusions) once for the
forward's matmul and again for the recompute's. A move delivers the value it moves: numbered
as a value of its own, it kept every recompute op downstream of a weight from matching its
forward. A round trip through the host (an offload policy's saved residual) stays apart."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat.values import value_numbers

MOVES = """
HloModule moves, is_scheduled=true

start_body {
  shard = bf16[64,32]{1,0} parameter(0)
  gathered = bf16[64,128]{1,0} all-gather(shard), channel_id=1, replica_groups={{0,1,2,3}},
      dimensions={1}, use_global_device_ids=true
  ROOT start = (bf16[64,32]{1,0}, bf16[64,128]{1,0}, u32[]) custom-call(gathered),
      custom_call_target="AsyncCollectiveStart"
}

done_body {
  shard.1 = bf16[64,32]{1,0} parameter(0)
  buffer = bf16[64,128]{1,0} parameter(1)
  flag = u32[] parameter(2)
  gathered.1 = bf16[64,128]{1,0} all-gather(shard.1), channel_id=1, replica_groups={{0,1,2,3}},
      dimensions={1}, use_global_device_ids=true
  ROOT done = bf16[64,128]{1,0} custom-call(shard.1, buffer, gathered.1, flag),
      custom_call_target="AsyncCollectiveDone"
}

ENTRY main {
  w = f32[64,32]{1,0:T(8,128)} parameter(0)
  s = bf16[64,32]{1,0} parameter(1)
  prefetch = (f32[64,32]{1,0:T(8,128)S(1)}, f32[64,32]{1,0:T(8,128)}, u32[]) copy-start(w)
  fetched = f32[64,32]{1,0:T(8,128)S(1)} copy-done(prefetch)
  prefetch.1 = (f32[64,32]{1,0:T(8,128)S(1)}, f32[64,32]{1,0:T(8,128)}, u32[]) copy-start(w)
  fetched.1 = f32[64,32]{1,0:T(8,128)S(1)} copy-done(prefetch.1)
  to_host = (f32[64,32]{1,0:T(8,128)S(5)}, f32[64,32]{1,0:T(8,128)}, u32[]) copy-start(w)
  on_host = f32[64,32]{1,0:T(8,128)S(5)} copy-done(to_host)
  gather = bf16[64,128]{1,0} all-gather(s), channel_id=2, replica_groups={{0,1,2,3}},
      dimensions={1}, use_global_device_ids=true
  started = (bf16[64,32]{1,0}, bf16[64,128]{1,0}, u32[]) fusion(s), kind=kCustom, calls=start_body
  carried = bf16[64,32]{1,0} get-tuple-element(started), index=0
  dest = bf16[64,128]{1,0} get-tuple-element(started), index=1
  sync = u32[] get-tuple-element(started), index=2
  gathered.2 = bf16[64,128]{1,0} fusion(carried, dest, sync), kind=kCustom, calls=done_body
  ROOT out = (f32[64,32]{1,0:T(8,128)S(1)}, f32[64,32]{1,0:T(8,128)S(1)}, f32[64,32]{1,0:T(8,128)S(5)},
      bf16[64,128]{1,0}, bf16[64,128]{1,0}) tuple(fetched, fetched.1, on_host, gather, gathered.2)
}
"""


def test_a_prefetched_copy_is_the_value_it_copies():
    values = value_numbers(hloparse.parse(MOVES)).exact
    assert values[("main", "fetched")] == values[("main", "w")] == values[("main", "fetched.1")]


def test_a_round_trip_through_the_host_stays_a_value_of_its_own():
    values = value_numbers(hloparse.parse(MOVES)).exact
    assert values[("main", "on_host")] != values[("main", "w")]


def test_an_async_collective_delivers_what_its_collective_computes():
    values = value_numbers(hloparse.parse(MOVES)).exact
    assert values[("main", "carried")] == values[("main", "s")]  # the start hands its shard on
    assert values[("main", "gathered.2")] == values[("main", "gather")]
    assert values[("main", "dest")] != values[("main", "gather")]  # the buffer being written: its own


def _recompute_through_a_second_prefetch() -> str:
    meta = lambda name: f'metadata={{op_name="jit(loss)/{name}"}}'  # noqa: E731
    return f"""
HloModule prefetched_twice, is_scheduled=true

ENTRY main {{
  x = f32[8,64]{{1,0}} parameter(0)
  w = f32[64,32]{{1,0:T(8,128)}} parameter(1)
  g = f32[8,32]{{1,0}} parameter(2)
  prefetch = (f32[64,32]{{1,0:T(8,128)S(1)}}, f32[64,32]{{1,0:T(8,128)}}, u32[]) copy-start(w)
  fetched = f32[64,32]{{1,0:T(8,128)S(1)}} copy-done(prefetch)
  y = f32[8,32]{{1,0}} dot(x, fetched), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
      {meta("jvp()/dot_general")}
  t = f32[8,32]{{1,0}} tanh(y), {meta("jvp()/tanh")}
  prefetch.1 = (f32[64,32]{{1,0:T(8,128)S(1)}}, f32[64,32]{{1,0:T(8,128)}}, u32[]) copy-start(w)
  fetched.1 = f32[64,32]{{1,0:T(8,128)S(1)}} copy-done(prefetch.1)
  y.1 = f32[8,32]{{1,0}} dot(x, fetched.1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
      {meta("transpose(jvp())/checkpoint/rematted_computation/dot_general")}
  t.1 = f32[8,32]{{1,0}} tanh(y.1), {meta("transpose(jvp())/checkpoint/rematted_computation/tanh")}
  d = f32[8,32]{{1,0}} multiply(t.1, g), {meta("transpose(jvp())/checkpoint/mul")}
  ROOT out = (f32[8,32]{{1,0}}, f32[8,32]{{1,0}}) tuple(t, d)
}}
"""


def test_a_recompute_reading_a_weight_prefetched_again_is_remat_and_sure():
    # A guard: the pairing reads the value numbers; the forward's dot and tanh stay model FLOPs.
    acc = account(hloparse.parse(_recompute_through_a_second_prefetch()), xla={"flops": 0.0})
    remat = {r.name for r in acc.rows if r.remat}
    assert {"y.1", "t.1"} <= remat and not remat & {"y", "t", "d"}
    assert acc.remat_flops_bounds[0] == acc.remat_flops_bounds[1]
