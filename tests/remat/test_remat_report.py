"""What the report says about remat and loops: unpaired remat-named ops (Report, --json, the
summary) and each loop's scope, source line, phase and parent. On the bundled seed 000 dumps."""

from __future__ import annotations

import json
from pathlib import Path

from hloflops import analyze

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
AFTER = EXAMPLES / "seed000_remat_scan.after_optimizations.hlo"
BEFORE = EXAMPLES / "seed000_remat_scan.before_optimizations.hlo"


def test_unpaired_remat_is_listed_and_said_in_the_summary():
    report = analyze(str(AFTER))
    unpaired = report.remat_unpaired
    rows = {(r.computation, r.name): r for r in report.rows}
    # Five remat-named ops of the backward loop pair with nothing, all copies XLA's fusion made
    # inside gradient fusions whose outputs are no recompute (the program without remat,
    # seed000_listed, copies them there too): two bias adds and a broadcast, a subtract and a
    # multiply. They count as model FLOPs.
    assert [(u.opcode, u.flops) for u in unpaired] == [("broadcast", 0), ("add", 7680), ("add", 7680),
                                                        ("subtract", 7680), ("multiply", 7680)]
    for u in unpaired:
        row = rows[(u.computation, u.name)]
        assert not row.remat and u.flops == row.total.flops
    data = json.loads(report.to_json())
    assert data["remat_unpaired"] == [{"name": u.name, "computation": u.computation, "opcode": u.opcode,
                                       "flops": u.flops} for u in unpaired]
    assert report.is_exact  # the split may be low; the totals are still exact
    assert ("remat-named ops without a twin: 5 (30,720 flops), counted as model flops (CSE merged them, XLA's "
            "fusion copied them into a gradient, or their forward was not found): the remat split may be low"
            ) in report.summary()


def test_no_unpaired_line_when_every_remat_op_pairs():
    report = analyze(str(EXAMPLES / "seed000_listed.after_optimizations.hlo"))
    assert report.remat_unpaired == () and "without a twin" not in report.summary()
    assert json.loads(report.to_json())["remat_unpaired"] == []


def test_loops_carry_scope_source_line_phase_and_parent():
    report = analyze(str(AFTER))
    loops = {lp["name"]: lp for lp in json.loads(report.to_json())["loops"]}
    assert loops["while.56"]["scope"] == "jit(train_step)/jvp(StackedMLPsRematted)/while"
    assert loops["while.56"]["phase"] == "forward"
    assert loops["while.54"]["scope"] == "jit(train_step)/transpose(jvp(StackedMLPsRematted))/while"
    assert loops["while.54"]["phase"] == "backward"
    assert loops["while.56"]["source_line"].endswith("make_examples.py:66")
    assert loops["while.56"]["source"] == "backend_config"  # where the trip count came from, as before
    summary = report.summary()
    assert "forward   jit(train_step)/jvp(StackedMLPsRematted)/while" in summary


def test_nested_loops_name_their_parent():
    # Before optimization remat_scan(lengths=(24, 1)) nests a one-step scan in each layer: in
    # the forward loop, and twice in the backward loop (the recompute's and the backward's).
    report = analyze(str(BEFORE))
    by_name = {lp.name: lp for lp in report.loops}
    inner = [lp for lp in report.loops if lp.parent is not None]
    assert sorted((lp.parent, lp.phase) for lp in inner) == [("while.56", "forward"), ("while.61", "backward"),
                                                             ("while.61", "backward")]
    for lp in inner:
        assert lp.scope.startswith(by_name[lp.parent].scope + "/body/")
    assert any("rematted_computation" in lp.scope for lp in inner)
