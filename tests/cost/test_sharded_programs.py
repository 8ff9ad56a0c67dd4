"""Sharded jax programs compiled on 8 host devices (in a subprocess: the device-count flag never
reaches this process): the bytes each device sends equal the hand formulas of
tests/programs/sharded_programs.py exactly, loops and nested loops included."""

from __future__ import annotations

import pytest

from hloflops import analyze
from tests.programs import sharded_programs as sp

pytest.importorskip("jax")


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    from tests.programs.sharded_compile import compiled_texts

    return compiled_texts()


@pytest.mark.parametrize("kind", list(sp.PER_EXECUTION))
@pytest.mark.parametrize("loop", list(sp.LOOPS))
def test_shard_map_collectives(texts: dict[str, str], kind: str, loop: str) -> None:
    report = analyze(texts[f"{kind}-{loop}"])
    comm = report.to_dict()["communication"]
    executions = sp.LOOPS[loop]
    assert report.devices == sp.DEVICES
    assert comm["uncounted"] == []
    assert comm["bytes_per_device"] == sp.PER_EXECUTION[kind] * executions
    assert comm["by_opcode"] == {sp.OPCODE[kind]: {"ops": 1, "executions": executions,
                                                   "bytes_per_device": sp.PER_EXECUTION[kind] * executions}}
    # the loops are really there (XLA did not unroll them) and hold all of it
    if loop != "top":
        outermost = [lp for lp in report.loops if lp.parent is None]
        assert len(outermost) == 1
        assert comm["by_loop"][outermost[0].name] == comm["bytes_per_device"]
        assert len(report.loops) == (2 if loop == "scan2_fori3" else 1)
    assert report.global_flops == report.flops * sp.DEVICES


@pytest.mark.parametrize("name", list(sp.NAMED_EXPECTED))
def test_named_sharding_programs(texts: dict[str, str], name: str) -> None:
    report = analyze(texts[name])
    comm = report.to_dict()["communication"]
    assert report.devices == sp.DEVICES
    assert comm["uncounted"] == []
    assert comm["bytes_per_device"] == sp.NAMED_EXPECTED[name]


def test_fsdp_gathers_once_per_layer(texts: dict[str, str]) -> None:
    report = analyze(texts["fsdp"])
    comm = report.to_dict()["communication"]
    assert comm["by_opcode"]["all-gather"]["executions"] == 3
    (loop,) = report.loops
    assert loop.trip_count == 3 and comm["by_loop"] == {loop.name: sp.NAMED_EXPECTED["fsdp"]}


def test_compile_cache_key_holds_the_device_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.programs.sharded_compile import _cache_path

    eight = _cache_path()
    monkeypatch.setattr(sp, "DEVICES", 4)
    assert _cache_path() != eight and "4dev" in _cache_path().name
