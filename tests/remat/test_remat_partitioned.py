"""A sharded matmul whose recompute the SPMD partitioner split another way than its forward
(hloflops.remat.partitioned): other local shapes, the same FLOPs on each device, the same inputs.

Hand-written after TPU draw 42 of the generator (eqx_list under tensor parallelism): the first
layer's up projection contracts the whole feature dimension in the forward (its weight gathered)
and a shard of it in the recompute (its partial sums all-reduced after); equinox names both
`vmap(eqx.nn.Linear)/dot_general`, the forward inside `jvp(...)`. The recompute was model FLOPs
(convolution -16,384, all-reduce -512, add -256 after optimization); the draw itself is in
tests/remat/test_remat_tpu_generated.py.
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat
from hloflops.remat.names import ends_with, inner_tail

FWD = "jit(loss)/jvp(vmap(eqx.nn.Linear))/dot_general"
REMAT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/vmap(eqx.nn.Linear)/dot_general"


def _module(partitions: int, recompute_weight: str = "p1") -> hloparse.Module:
    """The forward `x @ w` whole (`[16,32] x [32,16]`), the recompute from a shard of x's features
    and the weight read as `[16,32]` (`[16,16] x [16,32]`): 16,384 FLOPs each."""
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions={partitions}

ENTRY main {{
  p0 = f32[16,32] parameter(0)
  p1 = f32[32,16] parameter(1)
  p2 = f32[32,16] parameter(2)
  f = f32[16,16] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="{FWD}"}}
  xs = f32[16,16] slice(p0), slice={{[0:16], [0:16]}}
  wr = f32[16,32] reshape({recompute_weight})
  r = f32[16,32] dot(xs, wr), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="{REMAT}"}}
  ROOT t = (f32[16,16], f32[16,32]) tuple(f, r)
}}
""")


def test_a_module_name_in_brackets_inside_jvp_ends_the_forwards_name():
    assert ends_with(FWD, inner_tail(REMAT))
    assert not ends_with("jit(loss)/jvp(jvp())/dot_general", inner_tail(REMAT))


def test_a_recompute_partitioned_another_way_pairs_with_its_forward_by_flops():
    assert find_remat(_module(4)).remat == {("main", "r")}


def test_only_a_partitioned_module_and_only_the_same_inputs():
    # One partition: no partitioner chose the shapes, other shapes are another matmul.
    assert find_remat(_module(1)).remat == frozenset()
    # Another layer's weight: another value, whatever its FLOPs and name.
    assert find_remat(_module(4, recompute_weight="p2")).remat == frozenset()
