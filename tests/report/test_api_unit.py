"""Report / folded / diff / HTML on a hand-built Accounting (no parser, no accounting needed):
the product layer's arithmetic and formats, checked against numbers worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from hloflops.cost.costs import Cost
from hloflops.report.diff import diff_reports, growth_percent, render_diff
from hloflops.report.folded import folded_stacks
from hloflops.report.html import render_html, scope_tree
from hloflops.report.report import NO_SCOPE, Report, split_scope
from hloflops.results import Accounting, Loop, Row, Uncounted
from hloparse.ir import SourceLocation

LOOP_SCOPE = "jit(step)/jvp(Model)/while/body/stack"


def row(name, opcode, cost, executions=1, *, scope="", remat=False, phase="forward", loop=None, comp="main",
        source=None, uncounted=None):
    return Row(
        computation=comp, name=name, opcode=opcode, executions=executions, executions_known=True, cost=cost,
        total=cost.scaled(executions), fusion=None, loop=loop, remat=remat, phase=phase, scope=scope,
        source=source, uncounted=uncounted,
    )


def fake_accounting(trip: int = 24, *, dot_flops: int = 1600, name: str = "jit_step") -> Accounting:
    """A module with a 24-trip loop whose body holds a dot (1600 flops) and a remat'd tanh, and an
    entry with one add and one uncounted custom-call."""
    src = SourceLocation(file="model.py", line=12, function="__call__")
    rows = (
        row("add.1", "add", Cost(80, 0, 960), scope="jit(step)/loss/add", phase="other"),
        row("dot.2", "dot", Cost(dot_flops, 0, 2000), trip, scope=LOOP_SCOPE + "/Dense_0/dot_general",
            loop="while.5", comp="body", source=src),
        row("tanh.3", "tanh", Cost(40, 40, 320), trip, scope=LOOP_SCOPE + "/Dense_0/tanh", remat=True,
            phase="backward", loop="while.5", comp="body", source=src),
        row("cc.4", "custom-call", Cost(), scope="", comp="main", uncounted="unknown custom-call target foo"),
        row("while.5", "while", Cost(0, 0, 0), scope="jit(step)/jvp(Model)/while"),
    )
    body = Cost(dot_flops + 40, 40, 2320)
    total = Cost(80, 0, 960) + body.scaled(trip)
    loop = Loop(name="while.5", computation="main", body="body", condition="cond", trip_count=trip,
                source="backend_config", bounds=(trip, trip), executions=1, body_cost=body, total=body.scaled(trip),
                extra_over_xla=body.scaled(trip - 1))
    xla_flops = 80 + dot_flops + 40 - 1  # XLA: body once, custom-call -1
    return Accounting(
        module_name=name,
        rows=rows,
        loops=(loop,),
        uncounted=(Uncounted("cc.4", "custom-call", "main", "unknown custom-call target foo", target="foo"),),
        total=total,
        remat_flops=40 * trip,
        phase_flops={"forward": dot_flops * trip, "backward": 40 * trip, "other": 80},
        xla_estimate={"flops": float(xla_flops), "transcendentals": 40.0, "bytes accessed": float(960 + 2320 - 1)},
        reconciliation={"while.5": (dot_flops + 40) * (trip - 1), "residual": 1},
    )


@pytest.fixture
def report() -> Report:
    return Report(fake_accounting(), path="fake.hlo")


def test_totals_are_exact_ints(report):
    assert report.flops == 80 + 24 * 1640 == 39440
    assert isinstance(report.flops, int)
    assert report.remat_flops == 960
    assert report.model_flops == 39440 - 960
    assert report.transcendentals == 960
    assert report.xla_estimate == {"flops": 1719.0, "transcendentals": 40.0, "bytes_accessed": 3279.0}
    assert report.ratio_to_xla == round(39440 / 1719, 6)
    assert report.remat_overhead == round(960 / 38480, 6)
    assert not report.is_exact  # one uncounted op


def test_group_by_opcode_scope_source_computation(report):
    ops = {g.key: g for g in report.by_opcode()}
    assert ops["dot"].total.flops == 1600 * 24 and ops["dot"].executions == 24
    assert ops["tanh"].remat_flops == 960
    assert ops["custom-call"].uncounted == 1
    assert [g.key for g in report.by_opcode()][:2] == ["dot", "tanh"]  # largest FLOPs first
    scopes = {g.key: g.total.flops for g in report.by_scope(3)}
    assert scopes == {"jit(step)/jvp(Model)/while": 39360, "jit(step)/loss/add": 80, NO_SCOPE: 0}
    full = {g.key for g in report.by_scope()}
    assert LOOP_SCOPE + "/Dense_0/dot_general" in full
    src = {g.key: g.total.flops for g in report.by_source()}
    assert src["model.py:12"] == 39360
    modules = {g.key: g.total.flops for g in report.by_module()}
    assert modules == {"stack/Dense_0/dot_general": 38400, "stack/Dense_0/tanh": 960, "loss/add": 80,
                       "(no module)": 0}
    assert {g.key for g in report.by_module(depth=1)} == {"stack", "loss", "(no module)"}
    comps = {g.key: g.instructions for g in report.by_computation()}
    assert comps == {"body": 2, "main": 3}
    with pytest.raises(ValueError):
        report.group_by("color")


def test_split_scope_keeps_bracketed_slashes():
    assert split_scope("jit(f)/pjit[name=a/b]/transpose(jvp(x/y))/dot") == (
        "jit(f)", "pjit[name=a/b]", "transpose(jvp(x/y))", "dot")
    assert split_scope("") == ()


def test_to_dict_shape_and_determinism(report):
    d = report.to_dict()
    for key in ("flops", "transcendentals", "bytes_accessed", "model_flops", "remat_flops", "xla_estimate",
                "by_opcode", "loops", "uncounted"):
        assert key in d
    assert d["by_opcode"]["dot"] == {"flops": 38400, "transcendentals": 0, "bytes_accessed": 48000,
                                     "remat_flops": 0, "instructions": 1, "executions": 24, "uncounted": 0}
    assert d["loops"][0]["trip_count"] == 24 and d["loops"][0]["executions"] == 1
    assert d["loops"][0]["source"] == "backend_config"
    assert d["loops"][0]["share"] == round(39360 / 39440, 6)
    assert d["uncounted"] == [{"name": "cc.4", "opcode": "custom-call", "computation": "main",
                               "reason": "unknown custom-call target foo", "target": "foo", "executions": 1}]
    assert json.loads(json.dumps(d)) == d  # plain JSON types only
    assert report.to_json() == Report(fake_accounting(), path="fake.hlo").to_json()
    with_scope = report.to_dict(by=("scope",), depth=2, rows=True)
    assert set(with_scope["by_scope"]) == {"jit(step)/jvp(Model)", "jit(step)/loss", NO_SCOPE}
    assert len(with_scope["rows"]) == 5


def test_records_and_pandas(report):
    records = report.to_records()
    assert [r["name"] for r in records] == ["add.1", "dot.2", "tanh.3", "cc.4", "while.5"]
    assert records[1]["flops"] == 38400 and records[1]["flops_per_execution"] == 1600
    assert records[1]["source_file"] == "model.py" and records[1]["source_line"] == 12
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            report.to_pandas()
    else:
        frame = report.to_pandas()
        assert list(frame["name"]) == ["add.1", "dot.2", "tanh.3", "cc.4", "while.5"]
        assert int(frame["flops"].sum()) == report.flops


def test_mfu_states_which_flops(report):
    m = report.mfu(step_time_s=1e-3, peak_flops_per_s=1e8, num_devices=2)
    assert m.model_flops == 38480 and m.hardware_flops == 39440
    assert math.isclose(m.mfu, 38480 / (1e-3 * 1e8))
    assert math.isclose(m.hfu, 39440 / (1e-3 * 1e8))
    assert math.isclose(m.achieved_model_flops_per_s, 2 * 38480 / 1e-3)
    d = m.as_dict()
    assert "remat" in d["mfu_uses"] and "remat included" in d["hfu_uses"]
    with pytest.raises(ValueError):
        report.mfu(0, 1e9)


def test_folded_stacks(report):
    text = folded_stacks(report)
    lines = text.splitlines()
    assert lines == sorted(lines)
    stacks = dict(line.rsplit(" ", 1) for line in lines)
    assert stacks["jit_step;jit(step);jvp(Model);while;body;stack;Dense_0;dot_general;dot"] == "38400"
    assert stacks["jit_step;jit(step);jvp(Model);while;body;stack;Dense_0;tanh;tanh;[remat]"] == "960"
    assert sum(int(v) for v in stacks.values()) == report.flops
    assert all(int(v) > 0 for v in stacks.values())
    bytes_lines = folded_stacks(report, "bytes_accessed").splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in bytes_lines) == report.bytes_accessed
    with pytest.raises(ValueError):
        folded_stacks(report, "watts")


def test_scope_tree_and_html(report):
    tree = scope_tree(report)
    assert tree["v"][0] == report.flops and tree["v"][3] == report.remat_flops
    top = tree["c"][0]
    assert top["n"] == "jit(step)" and top["x"] == [1, 24]
    dense = top["c"][0]["c"][0]["c"][0]["c"][0]["c"][0]  # jvp(Model)/while/body/stack/Dense_0
    assert dense["n"] == "Dense_0" and dense["x"] == [24, 24] and dense["v"][3] == 960
    page = render_html(report)
    assert "<script src" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.count("<script") == 2 and "</script>" in page
    assert "while.5" in page and "39,440" in page


def test_html_escapes_hostile_names():
    acc = fake_accounting(name="m</script><b>")
    page = render_html(Report(acc))
    assert "m</script><b>" not in page
    assert page.count("</script>") == 2


def test_diff_and_budget():
    a = Report(fake_accounting(24))
    b = Report(fake_accounting(32))
    result = diff_reports(a, b, by="scope", depth=3)
    totals = result.totals()
    assert totals["flops"]["delta"] == 8 * 1640
    assert result.groups[0].key == "jit(step)/jvp(Model)/while"
    assert result.groups[0].delta.flops == 8 * 1640
    growth = 8 * 1640 * 100 / 39440
    assert math.isclose(result.flops_growth, growth)
    assert result.exceeds(growth - 0.01) and not result.exceeds(growth + 0.01)
    text = render_diff(result, fail_above=10)
    assert "EXCEEDED" in text
    assert "loops in A: while.5 x24" in text and "loops in B: while.5 x32" in text
    assert json.loads(result.to_json(fail_above=50))["budget_exceeded"] is False
    assert growth_percent(0, 0) == 0.0 and math.isinf(growth_percent(0, 5))


def test_summary_groups_many_uncounted_ops():
    from dataclasses import replace

    from hloflops.report.text import MAX_UNCOUNTED_LINES, render_summary

    many = tuple(Uncounted(f"cc.{i}", "custom-call", "main", "target foo: arithmetic unknown", target="foo")
                 for i in range(MAX_UNCOUNTED_LINES + 1))
    text = render_summary(Report(replace(fake_accounting(), uncounted=many)))
    assert f"UNCOUNTED ops ({MAX_UNCOUNTED_LINES + 1})" in text
    n = MAX_UNCOUNTED_LINES + 1
    line = f"! {n} x custom-call target=foo: target foo: arithmetic unknown (cc.0, cc.1, cc.2, ...)"
    assert line in text
    few = render_summary(Report(fake_accounting()))
    assert "! cc.4 (custom-call target=foo) in main x1: unknown custom-call target foo" in few
