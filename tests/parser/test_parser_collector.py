"""The garbage collector around a parse and an analysis (hloparse/allocation.py): what they build
goes to the oldest generation, and the caller's own collector settings are left as they were."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import hloparse
from hloflops import analyze
from hloparse.errors import HloParseError

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "lax_scan.after_optimizations.hlo").read_text()


def _in_oldest_generation(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects(generation=2))


def test_parsed_module_goes_to_the_oldest_generation_and_the_collector_stays_on() -> None:
    assert gc.isenabled()
    module = hloparse.parse(EXAMPLE)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert _in_oldest_generation(module.computations[0])


def test_report_goes_to_the_oldest_generation() -> None:
    report = analyze(EXAMPLE)
    assert gc.isenabled()
    assert _in_oldest_generation(report.accounting)


def test_objects_the_caller_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        hloparse.parse(EXAMPLE)
        analyze(EXAMPLE)
        # Nothing thawed, nothing of ours added (frozen objects that die leave the count).
        assert frozen - 100 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled() -> None:
    gc.disable()
    try:
        hloparse.parse(EXAMPLE)
        analyze(EXAMPLE)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_back_on_after_a_parse_error() -> None:
    with pytest.raises(HloParseError):
        hloparse.parse("HloModule m\n\nENTRY e {\n  ROOT x = f32[] bogus-op(\n}\n")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
