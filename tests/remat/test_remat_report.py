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
    # Seven remat-named ops of the backward loop pair with nothing, copies XLA's fusion made:
    # the program without remat (seed000_listed) runs each layer's bias add three times (its
    # forward's and two copies in gradient fusions), this one four (the forward's, and copies in
    # the recompute's sigmoid and product fusions and in a gradient fusion): one of the
    # recompute's copies is recompute, as often as the forward computes the add, the other two
    # are the twin's copies (an add and its broadcast in each of two fusions). A subtract, a
    # multiply and a broadcast (no flops) sit in a gradient fusion too. They count as model FLOPs.
    assert [(u.opcode, u.flops) for u in unpaired] == [("broadcast", 0), ("add", 7680), ("broadcast", 0),
                                                        ("subtract", 7680), ("multiply", 7680), ("broadcast", 0),
                                                        ("add", 7680)]
    for u in unpaired:
        row = rows[(u.computation, u.name)]
        assert not row.remat and u.flops == row.total.flops
    data = json.loads(report.to_json())
    assert data["remat_unpaired"] == [{"name": u.name, "computation": u.computation, "opcode": u.opcode,
                                       "flops": u.flops} for u in unpaired]
    assert report.is_exact
    # Each of the seven is shown to be model FLOPs (a gradient fusion's copy): the split is exact,
    # its bounds are the number, and the summary says nothing of a split that may be low.
    assert report.remat_flops == 192_000 and report.remat_flops_bounds == (192_000, 192_000)
    assert data["remat_flops_bounds"] == [192_000, 192_000] and data["remat_hinges"] == []
    assert "may be low" not in report.summary() and "remat flops between" not in report.summary()


UNSURE = """
HloModule m, is_scheduled=true

ENTRY main {
  x = f32[4,4] parameter(0)
  w = f32[4,4] parameter(1)
  v = f32[4,4] parameter(2)
  f = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="FWD"}
  r = f32[4,4] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="REM"}
  ROOT t = (f32[4,4], f32[4,4]) tuple(f, r)
}
""".replace("FWD", "jit(f)/jvp(M)/a/dot_general").replace(
    "REM", "jit(f)/transpose(jvp(M))/checkpoint/rematted_computation/b/dot_general")


def test_a_split_that_hinges_on_an_unpaired_remat_op_is_a_range():
    # After optimization (a scheduled module) a remat-named dot that pairs with nothing may be a
    # recompute CSE merged into its forward, or one whose forward was not found: counted as
    # model FLOPs, and the bounds say it could be remat (128 flops).
    import hloparse
    from hloflops.report.report import Report
    from hloflops.accounting import account

    report = Report(account(hloparse.parse(UNSURE), xla={"flops": 0.0}))
    assert report.remat_flops == 0 and report.remat_flops_bounds == (0, 128)
    assert [(h.name, h.flops, h.counted) for h in report.remat_hinges] == [("r", 128, False)]
    assert "remat flops between 0 and 128: the split hinges on 1 ops" in report.summary()
    assert "the remat split may be low" in report.summary()
    # Before optimization (not scheduled) nothing merged it: its own work, and no range.
    before = Report(account(hloparse.parse(UNSURE.replace(", is_scheduled=true", "")), xla={"flops": 0.0}))
    assert before.remat_flops_bounds == (0, 0) and "may be low" not in before.summary()


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
