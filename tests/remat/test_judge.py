"""The judge's verdicts (tests/remat/judge.py) on made-up numbers: what `ok` and `in_bounds` accept."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from tests.remat.judge import LOOP_TOLERANCE, Verdict  # noqa: E402


def _verdict(truth, reported, bounds, loops=0, twin_remat=0):
    return Verdict("v", "after", truth, reported, twin_remat, loops, bounds)


def test_an_exact_split_is_in_bounds_whatever_its_bounds():
    v = _verdict({"dot": 100}, {"dot": 100}, (100, 100))
    assert v.ok and v.in_bounds and v.width == 0


def test_a_wrong_split_with_the_truth_inside_its_bounds_is_in_bounds_not_ok():
    v = _verdict({"dot": 100, "add": 10}, {"dot": 100, "add": 30}, (110, 130))
    assert not v.ok and v.in_bounds and v.width == 20


def test_a_confident_wrong_split_is_neither():
    v = _verdict({"add": 10}, {"add": 30}, (30, 30))
    assert not v.ok and not v.in_bounds


def test_the_bounds_take_a_loop_counters_tolerance_either_side():
    inside = _verdict({"multiply": 10}, {"multiply": 10 + 2 * LOOP_TOLERANCE}, (10 + 2 * LOOP_TOLERANCE,) * 2, loops=2)
    outside = _verdict({"multiply": 10}, {"multiply": 11 + 2 * LOOP_TOLERANCE}, (11 + 2 * LOOP_TOLERANCE,) * 2, loops=2)
    assert not inside.ok and inside.in_bounds
    assert not outside.in_bounds


def test_remat_found_in_the_twin_is_never_in_bounds():
    v = _verdict({"dot": 100}, {"dot": 100}, (0, 200), twin_remat=4)
    assert not v.ok and not v.in_bounds


def test_a_draw_whose_program_runs_fewer_converts_than_its_twin_is_not_attainable():
    # the twin converts a bf16 value to save it and the program with remat does not: no split
    # (remat FLOPs are never negative) matches every opcode
    fewer = _verdict({"dot": 4096, "convert": -512}, {"dot": 4096}, None, loops=2)
    assert not fewer.ok and not fewer.attainable
    counter = _verdict({"dot": 4096, "add": -64}, {"dot": 4096}, None, loops=2)  # a loop counter's tolerance
    assert counter.ok and counter.attainable
