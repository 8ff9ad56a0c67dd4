# ruff: noqa: E501  (HLO text, one instruction a line, as XLA prints it)
"""Small hand-written TPU modules: the rules of hloflops.cost.fused_collectives and the mesh
`device_ids` syntax on their own, beside the compiled catalogue (test_tpu_catalogue.py)."""

from __future__ import annotations

import pytest

import hloflops
import hloparse

# A scheduled TPU module (tiled layouts, TPU's backend_config fields) holding one kCustom fusion
# with a collective inside; BODY is that fusion's computation.
MODULE = """HloModule tpu_units, is_scheduled=true, entry_computation_layout={(bf16[1024,256]{1,0:T(8,128)(2,1)})->bf16[256,256]{1,0:T(8,128)(2,1)}}, num_partitions=4

%add (x: bf16[], y: bf16[]) -> bf16[] {
  %x = bf16[] parameter(0)
  %y = bf16[] parameter(1)
  ROOT %s = bf16[] add(%x, %y)
}

BODY

ENTRY %main (p: bf16[1024,256]) -> bf16[256,256] {
  %p = bf16[1024,256]{1,0:T(8,128)(2,1)} parameter(0)
  ROOT %f = bf16[256,256]{1,0:T(8,128)(2,1)} fusion(%p), kind=kCustom, calls=%fused, backend_config={"flag_configs":[],"scoped_memory_configs":[]}
}
"""

SLICED = """%fused (input: bf16[1024,256]) -> bf16[256,256] {
  %input = bf16[1024,256]{1,0:T(8,128)(2,1)} parameter(0)
  %ar = bf16[1024,256]{1,0:T(8,128)(2,1)} all-reduce(%input), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  %pid = u32[] partition-id()
  %c = u32[] constant(256)
  %off = u32[] multiply(%pid, %c)
  %zero = u32[] constant(0)
  ROOT %ds = bf16[256,256]{1,0:T(8,128)(2,1)} dynamic-slice(%ar, %off, %zero), dynamic_slice_sizes={256,256}
}"""

UNKNOWN = """%fused (input: bf16[1024,256]) -> bf16[256,256] {
  %input = bf16[1024,256]{1,0:T(8,128)(2,1)} parameter(0)
  %ar = bf16[1024,256]{1,0:T(8,128)(2,1)} all-reduce(%input), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  ROOT %sl = bf16[256,256]{1,0:T(8,128)(2,1)} slice(%ar), slice={[0:256], [0:256]}
}"""


def test_all_reduce_scatter_fusion_is_a_reduce_scatter() -> None:
    comm = hloflops.analyze(MODULE.replace("BODY", SLICED)).to_dict()["communication"]
    # each device keeps a quarter: it sends (4-1)/4 of the 524,288 input bytes, not 2 (4-1)/4
    assert comm["by_opcode"] == {"reduce-scatter": {"ops": 1, "executions": 1, "bytes_per_device": 393_216}}
    assert comm["uncounted"] == []


def test_a_sliced_all_reduce_whose_slice_disagrees_with_its_groups_is_uncounted() -> None:
    text = MODULE.replace("BODY", SLICED).replace("{{0,1,2,3}}", "{{0,1},{2,3}}")
    (entry,) = hloflops.analyze(text).to_dict()["communication"]["uncounted"]
    assert "4 devices but its groups hold 2" in entry["reason"]


def test_a_fused_collective_of_an_unknown_kind_is_uncounted_and_named() -> None:
    comm = hloflops.analyze(MODULE.replace("BODY", UNKNOWN)).to_dict()["communication"]
    (entry,) = comm["uncounted"]
    assert entry["name"] == "ar" and "fused into fused" in entry["reason"] and "does not know" in entry["reason"]
    assert comm["bytes_per_device"] == 0


def test_outside_tpu_a_fused_collective_is_itself() -> None:
    # GPU's Triton collective fusions run the collective they hold: charged as it stands
    text = MODULE.replace("BODY", UNKNOWN).replace("(2,1)", "").replace(":T(8,128)", "")
    comm = hloflops.analyze(text).to_dict()["communication"]
    assert comm["uncounted"] == [] and comm["by_opcode"]["all-reduce"]["bytes_per_device"] == 786_432


MESH_GATHER = """HloModule m, num_partitions=8

ENTRY %e (p: f32[8]) -> f32[32] {
  %p = f32[8] parameter(0)
  ROOT %a = f32[32] all-gather(%p), channel_id=1, replica_groups=GROUPS, dimensions={0}, use_global_device_ids=true
}
"""


@pytest.mark.parametrize("groups", [
    "mesh['a'=2,'b'=4], device_ids=([2,4]T(1,0)) {'b'}",
    "mesh['a'=2,'b'=4], device_ids=(0,4,1,5,2,6,3,7) {'b'}",
])
def test_mesh_device_ids_as_xla_prints_them(groups: str) -> None:
    r = hloflops.analyze(MESH_GATHER.replace("GROUPS", groups))
    assert r.to_dict()["communication"]["by_opcode"]["all-gather"]["bytes_per_device"] == 3 * 32 * 4 // 4


def test_mesh_device_ids_of_the_wrong_length_is_a_one_line_error() -> None:
    text = MESH_GATHER.replace("GROUPS", "mesh['a'=2,'b'=4], device_ids=(0,1,2) {'b'}")
    with pytest.raises(hloparse.HloParseError) as error:
        hloparse.parse(text)
    assert "device_ids lists 3" in str(error.value) and "\n" not in str(error.value).strip()
