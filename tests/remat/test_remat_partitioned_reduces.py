"""A sharded reduce whose recompute the SPMD partitioner split another way than its forward
(hloflops.remat.partitioned): the forward sums a layer norm's features whole on each device, the
recompute sums a shard of them and all-reduces the partial sums. Other local shapes, fewer FLOPs
per device, the same sum of the same inputs.

Hand-written after TPU draw 45 of the generator (hk_layer_stack attention under FSDP: the first
layer norm's mean and variance sums, `f32[2,64,64] -> [2,64]` in the forward, `f32[2,64,16] ->
[2,64]` plus an all-reduce in the recompute). The recompute's sums matched no twin and were model
FLOPs, and so was their share of the variadic all-reduces completing them (reduce -3,840,
all-reduce -384 after optimization; TPU draws 17 and 43 alike).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

FWD = "jit(loss)/jvp()/layer_norm/jit(_var)/reduce_sum"
REMAT = "jit(loss)/transpose(jvp())/checkpoint/rematted_computation/layer_norm/reduce_sum"


def _module(partitions: int, recompute_input: str = "x", shard: int = 16) -> hloparse.Module:
    """The forward's sum over all 64 features of x, the recompute's over a shard of them."""
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions={partitions}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY main {{
  x = f32[2,64,64] parameter(0)
  y = f32[2,64,64] parameter(1)
  zero = f32[] constant(0)
  f = f32[2,64] reduce(x, zero), dimensions={{2}}, to_apply=add, metadata={{op_name="{FWD}"}}
  xs = f32[2,64,{shard}] slice({recompute_input}), slice={{[0:2], [0:64], [0:{shard}]}}
  r = f32[2,64] reduce(xs, zero), dimensions={{2}}, to_apply=add, metadata={{op_name="{REMAT}"}}
  all = f32[2,64] all-reduce(r), replica_groups={{{{0,1,2,3}}}}, to_apply=add, metadata={{op_name="{REMAT}"}}
  ROOT t = (f32[2,64], f32[2,64]) tuple(f, all)
}}
""")


def test_a_reduce_of_a_shard_pairs_with_the_forward_reduce_of_the_whole_dimension():
    # and the all-reduce completing its partial sums is recompute with it (remat/collectives.py)
    assert find_remat(_module(4)).remat == {("main", "r"), ("main", "all")}


def test_only_a_partitioned_module_the_same_inputs_and_a_shard_that_divides():
    assert find_remat(_module(1)).remat == frozenset()  # one partition: another sum
    assert ("main", "r") not in find_remat(_module(4, recompute_input="y")).remat  # another input
    assert ("main", "r") not in find_remat(_module(4, shard=24)).remat  # 24 does not divide 64
