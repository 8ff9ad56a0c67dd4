# ruff: noqa: E501  (HLO instructions are long lines)
"""Replica groups in every syntax XLA prints, group modes, and the bytes each device sends per
collective (ring formulas, rounded up per execution, multiplied by executions)."""

from __future__ import annotations

import pytest

import hloparse
from hloflops import analyze
from hloflops.cost.collectives import (
    CROSS_PARTITION,
    CROSS_REPLICA,
    CROSS_REPLICA_AND_PARTITION,
    FLATTENED_ID,
    GroupSyntaxError,
    group_mode,
    parse_replica_groups,
    parse_source_target_pairs,
    participants,
)
from hloflops.cost.communication import (
    all_gather_bytes,
    all_reduce_bytes,
    all_to_all_bytes,
    reduce_scatter_bytes,
)

# ---- replica group syntaxes ----------------------------------------------------------------


def test_explicit_and_empty_groups() -> None:
    assert parse_replica_groups("{{0,1},{2,3}}") == ((0, 1), (2, 3))
    assert parse_replica_groups("{ {0, 2}, {1, 3} }") == ((0, 2), (1, 3))
    assert parse_replica_groups("{{0}}") == ((0,),)
    assert parse_replica_groups("{}") == ()


def test_iota_groups() -> None:
    assert parse_replica_groups("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))
    # iota(8) as [4,2], transposed: columns become rows.
    assert parse_replica_groups("[2,4]<=[4,2]T(1,0)") == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert parse_replica_groups("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_replica_groups("[1,16]<=[16]") == (tuple(range(16)),)
    # three dimensions, transposed
    assert parse_replica_groups("[2,4]<=[2,2,2]T(2,1,0)") == ((0, 4, 2, 6), (1, 5, 3, 7))


def test_mesh_groups() -> None:
    # the devices that differ only along the named axis
    assert parse_replica_groups("mesh['x'=2,'y'=4] {'x'}") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_replica_groups("mesh['x'=2,'y'=4] {'y'}") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert parse_replica_groups("mesh['x'=2,'y'=4] {'x','y'}") == (tuple(range(8)),)
    # what jax 0.10.2 prints for a 2x4 mesh's data axis
    assert parse_replica_groups("mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_replica_groups("mesh['x'=2,'y'=2, device_ids=(3,2,1,0)] {'x'}") == ((3, 1), (2, 0))
    # XLA prints the device order after the mesh (TPU modules whose mesh is not in device order):
    # a list, or iota(n) reshaped and transposed; jaxlib 0.10.2's parser reads both, as printed here
    assert parse_replica_groups("mesh['x'=2,'y'=2], device_ids=(3,2,1,0) {'x'}") == ((3, 1), (2, 0))
    assert parse_replica_groups("mesh['x'=2,'y'=1,'z'=2], device_ids=([2,2]T(1,0)) {'x'}") == ((0, 1), (2, 3))
    assert parse_replica_groups("mesh['x'=2,'y'=4], device_ids=([2,4]T(1,0)) {'y'}") == ((0, 4, 1, 5), (2, 6, 3, 7))
    # sub-axis (pre-size 1, size 2) of an axis of 8: [8] -> [1,2,4], groups along the 2
    assert parse_replica_groups("mesh['x'=8] {'x':(1)2}") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_replica_groups("mesh['x'=8] {'x':(4)2}") == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert parse_replica_groups("mesh['x'=2,'y'=2] {1}") == ((0, 1), (2, 3))  # axis by index


@pytest.mark.parametrize("raw", [
    "{{0,1},x}", "[2,4]<=[6]", "[2,4]<=[4,2]T(0,0)", "mesh['x'=2] {'z'}", "mesh['x'=2, device_ids=(0)] {'x'}",
    "mesh['x'=8] {'x':(3)2}", "bogus",
])
def test_unreadable_groups_raise(raw: str) -> None:
    with pytest.raises(GroupSyntaxError):
        parse_replica_groups(raw)


def test_source_target_pairs() -> None:
    assert parse_source_target_pairs("{{0,1},{1,2},{2,0}}") == ((0, 1), (1, 2), (2, 0))
    with pytest.raises(GroupSyntaxError):
        parse_source_target_pairs("{{0,1,2}}")


def test_group_mode_follows_xla() -> None:
    # XLA's GetCollectiveOpGroupMode table: (has_channel_id, use_global_device_ids) -> mode
    assert group_mode("all-reduce", False, None) == CROSS_REPLICA
    assert group_mode("all-reduce", False, False) == CROSS_REPLICA
    with pytest.raises(GroupSyntaxError):
        group_mode("all-reduce", False, True)
    assert group_mode("all-reduce", True, None) == CROSS_REPLICA_AND_PARTITION  # a bool flag, absent = false
    assert group_mode("all-gather", True, True) == FLATTENED_ID
    assert group_mode("all-to-all", True, None) == CROSS_PARTITION  # no flag at all
    assert group_mode("collective-permute", False, None) == CROSS_REPLICA


def test_participants_by_mode() -> None:
    # empty groups: everyone of the mode's kind
    assert participants("all-reduce", {"replica_groups": "{}"}, 4, 2).sizes == (4,)
    assert participants("all-to-all", {"replica_groups": "{}", "channel_id": "1"}, 4, 2).sizes == (2,)
    assert participants("all-reduce", {"replica_groups": "{}", "channel_id": "1"}, 4, 2).sizes == (8,)
    with pytest.raises(GroupSyntaxError):
        participants("all-reduce", {"replica_groups": "{}", "channel_id": "1", "use_global_device_ids": "true"}, 4, 2)
    # replica ids across every partition: a group of 2 replicas x 3 partitions
    assert participants("all-gather", {"replica_groups": "{{0,1}}", "channel_id": "1"}, 2, 3).sizes == (6,)
    assert participants("all-gather", {"replica_groups": "{{0,1},{2}}", "channel_id": "1",
                                       "use_global_device_ids": "true"}, 1, 3).largest == 2
    with pytest.raises(GroupSyntaxError):
        participants("all-reduce", {"replica_groups": "{{0,0}}"}, 2, 1)


# ---- formulas --------------------------------------------------------------------------------


def test_ring_formulas_round_up_and_n1_moves_nothing() -> None:
    assert all_reduce_bytes(4096, 1) == all_gather_bytes(4096, 1) == reduce_scatter_bytes(4096, 1) == 0
    assert all_to_all_bytes(4096, 1) == 0
    assert all_reduce_bytes(4096, 2) == 4096  # 2 (2-1)/2 S
    assert all_reduce_bytes(3, 4) == 5  # 2*3*3/4 = 4.5 -> 5
    assert all_gather_bytes(10, 3) == 7  # 2/3 * 10 = 6.67 -> 7
    assert reduce_scatter_bytes(10, 4) == 8  # 3/4 * 10 = 7.5 -> 8
    assert all_to_all_bytes(7, 8) == 7  # 7/8 * 7 = 6.125 -> 7


# ---- on modules ------------------------------------------------------------------------------

HEADER = "HloModule m, replica_count=1, num_partitions=4\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n"


def _sent(body: str, header: str = HEADER) -> dict[str, tuple[int, int, str | None]]:
    report = analyze(header + body)
    return {r.name: (r.communication, r.communication_total, r.communication_uncounted)
            for r in report.rows if r.communication or r.communication_uncounted}


def test_async_pairs_count_once() -> None:
    sent = _sent("""
ENTRY e {
  p = f32[128,32] parameter(0)
  ar = f32[128,32] all-reduce-start(p), channel_id=1, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=add
  ard = f32[128,32] all-reduce-done(ar)
  ag = (f32[128,32], f32[128,128]) all-gather-start(p), channel_id=2, replica_groups=mesh['x'=4] {'x'}, dimensions={1}, use_global_device_ids=true
  agd = f32[128,128] all-gather-done(ag)
  rs = ((f32[128,32]), f32[32,32]) reduce-scatter-start(p), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add, use_global_device_ids=true
  rsd = f32[32,32] reduce-scatter-done(rs)
  a2a = ((f32[128,32]), f32[128,32]) all-to-all-start(p), channel_id=4, replica_groups={{0,1},{2,3}}, dimensions={0}
  a2ad = f32[128,32] all-to-all-done(a2a)
  cp = (f32[128,32], f32[128,32], u32[], u32[]) collective-permute-start(p), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  cpd = f32[128,32] collective-permute-done(cp)
  ROOT t = (f32[128,32], f32[128,128], f32[32,32], f32[128,32], f32[128,32]) tuple(ard, agd, rsd, a2ad, cpd)
}
""")
    s = 128 * 32 * 4
    assert sent == {
        "ar": (2 * 3 * s // 4, 2 * 3 * s // 4, None),
        "ag": (3 * (4 * s) // 4, 3 * (4 * s) // 4, None),
        "rs.wrapped": (3 * s // 4, 3 * s // 4, None),
        "a2a.wrapped": ((2 - 1) * s // 2, (2 - 1) * s // 2, None),  # groups of 2
        "cp": (s, s, None),
    }


def test_point_to_point_and_broadcast() -> None:
    sent = _sent("""
ENTRY e {
  p = f32[16] parameter(0)
  self = f32[16] collective-permute(p), channel_id=1, source_target_pairs={{0,0},{1,1},{2,2},{3,3}}
  bc = f32[16] collective-broadcast(p), channel_id=2, replica_groups={{0,1,2,3}}
  tok = token[] after-all()
  s = (f32[16], u32[], token[]) send(p, tok), channel_id=3
  sd = token[] send-done(s), channel_id=3
  h = (f32[16], u32[], token[]) send(p, tok), channel_id=4, is_host_transfer=true
  hd = token[] send-done(h), channel_id=4, is_host_transfer=true
  r = (f32[16], u32[], token[]) recv(tok), channel_id=5
  rd = (f32[16], token[]) recv-done(r), channel_id=5
  ROOT t = (f32[16], f32[16]) tuple(self, bc)
}
""")
    assert sent == {"bc": (64, 64, None), "s": (64, 64, None)}  # self-pairs, host transfer and recv send nothing


def test_undecodable_or_inconsistent_groups_are_uncounted() -> None:
    sent = _sent("""
ENTRY e {
  p = f32[8,4] parameter(0)
  bad = f32[8,4] all-reduce(p), replica_groups=[2,3]<=[8], to_apply=add
  mismatch = f32[8,12] all-gather(p), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={1}, use_global_device_ids=true
  ROOT t = (f32[8,4], f32[8,12]) tuple(bad, mismatch)
}
""")
    assert sent["bad"][:2] == (0, 0) and "cannot decode its groups" in sent["bad"][2]
    assert sent["mismatch"][:2] == (0, 0) and "says 3 devices but its groups hold 2" in sent["mismatch"][2]
    report = analyze(HEADER + """
ENTRY e {
  p = f32[8,4] parameter(0)
  ROOT bad = f32[8,4] all-reduce(p), replica_groups=[2,3]<=[8], to_apply=add
}
""")
    comm = report.to_dict()["communication"]
    assert comm["bytes_per_device"] == 0
    assert [u["name"] for u in comm["uncounted"]] == ["bad"]


def test_loops_nested_loops_and_conditionals_multiply() -> None:
    text = HEADER + """
inner_body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64] get-tuple-element(p), index=1
  y = f32[64] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[64]) tuple(j, y)
}
inner_cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}
outer_body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64] get-tuple-element(p), index=1
  zero = s32[] constant(0)
  t = (s32[], f32[64]) tuple(zero, x)
  wi = (s32[], f32[64]) while(t), condition=inner_cond, body=inner_body
  z = f32[64] get-tuple-element(wi), index=1
  g = f32[64] all-gather(z), channel_id=2, replica_groups={{0},{1},{2},{3}}, dimensions={0}, use_global_device_ids=true
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[64]) tuple(j, g)
}
outer_cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT c = pred[] compare(i, n), direction=LT
}
big {
  p = f32[64] parameter(0)
  ROOT a = f32[64] all-to-all(p), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}
}
small {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
ENTRY e {
  x = f32[64] parameter(0)
  b = pred[] parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[64]) tuple(zero, x)
  w = (s32[], f32[64]) while(t), condition=outer_cond, body=outer_body
  y = f32[64] get-tuple-element(w), index=1
  ROOT c = f32[64] conditional(b, y, y), true_computation=small, false_computation=big
}
"""
    report = analyze(text)
    s = 64 * 4
    per_all_reduce = 2 * (4 - 1) * s // 4
    inner_runs = 5 * 3
    # conditional: the branch XLA's convention counts is the one with the most flops (negate: 64
    # flops, all-to-all: 0), so the all-to-all branch runs 0 times in the total.
    assert report.communication_bytes == inner_runs * per_all_reduce
    comm = report.to_dict()["communication"]
    assert comm["by_opcode"]["all-reduce"] == {"ops": 1, "executions": 15, "bytes_per_device": 15 * per_all_reduce}
    assert comm["by_opcode"]["all-gather"] == {"ops": 1, "executions": 5, "bytes_per_device": 0}  # groups of 1
    assert comm["by_opcode"]["all-to-all"] == {"ops": 1, "executions": 0, "bytes_per_device": 0}
    assert comm["by_loop"] == {"w": 15 * per_all_reduce, "wi": 15 * per_all_reduce}
    assert report.devices == 4 and report.global_flops == 4 * report.flops


def test_every_collective_opcode_has_a_sender() -> None:
    from hloflops.cost.communication import SENDERS

    assert set(SENDERS) >= {"all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
                            "all-to-all", "ragged-all-to-all", "collective-permute", "collective-permute-start",
                            "collective-broadcast", "send"}
    assert not set(SENDERS) & {"all-reduce-done", "all-gather-done", "collective-permute-done", "recv",
                               "send-done", "recv-done", "async-start", "async-done"}


def test_parse_keeps_replica_groups_text() -> None:
    module = hloparse.parse(HEADER + """
ENTRY e {
  p = f32[4] parameter(0)
  ROOT ar = f32[4] all-reduce(p), replica_groups=mesh['a'=2,'b'=2] {'b'}, to_apply=add
}
""")
    inst = module.entry.root
    assert parse_replica_groups(inst.attributes["replica_groups"]) == ((0, 1), (2, 3))


def test_combined_and_in_place_collective_permutes() -> None:
    sent = _sent("""
ENTRY e {
  p = f32[16] parameter(0)
  q = f32[8] parameter(1)
  both = (f32[16], f32[8]) collective-permute(p, q), channel_id=1, source_target_pairs={{0,1},{1,0}}
  zero = s32[] constant(0)
  idx = (s32[]) tuple(zero)
  inplace = f32[16] collective-permute(p, p, idx, idx), channel_id=2, source_target_pairs={{0,1},{1,0}}, slice_sizes={{8}}
  ROOT t = ((f32[16], f32[8]), f32[16]) tuple(both, inplace)
}
""")
    assert sent["both"] == (64 + 32, 64 + 32, None)
    assert sent["inplace"][:2] == (0, 0) and "in-place" in sent["inplace"][2]
