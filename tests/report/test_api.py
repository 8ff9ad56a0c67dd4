"""The Python API end to end: `analyze` on every kind of source (text, path, Module, jax
Lowered/Compiled), `compare` against XLA asked live, and the Report's tables and exports on the
bundled examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hloflops
import hloparse
from hloflops import analyze, compare
from hloflops.report.report import NO_SCOPE

ROOT = Path(__file__).resolve().parents[2]
REMAT_SCAN = ROOT / "examples" / "seed000_remat_scan.after_optimizations.hlo"
FORI = ROOT / "examples" / "fori_loop.after_optimizations.hlo"


@pytest.fixture(scope="module")
def report():
    return analyze(REMAT_SCAN)


def _without_path(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "path"}


def test_every_source_kind_gives_the_same_report(report):
    text = REMAT_SCAN.read_text()
    by_text = analyze(text)
    by_str_path = analyze(str(REMAT_SCAN))
    by_module = analyze(hloparse.parse(text))
    by_bytes = analyze(text.encode())
    assert report.path == str(REMAT_SCAN) and by_str_path.path == str(REMAT_SCAN)
    for other in (by_text, by_str_path, by_module, by_bytes):
        assert _without_path(other.to_dict(rows=True)) == _without_path(report.to_dict(rows=True))
    with pytest.raises(TypeError, match="analyze"):
        analyze(42)
    with pytest.raises((FileNotFoundError, hloparse.HloParseError), match="no_such_file"):
        analyze(ROOT / "examples" / "no_such_file.hlo")


def test_lazy_package_exports():
    assert hloflops.Report.__name__ == "Report" and callable(hloflops.analyze) and callable(hloflops.compare)
    with pytest.raises(AttributeError):
        hloflops.no_such_name  # noqa: B018


def test_report_totals_and_loops(report):
    assert isinstance(report.flops, int) and report.flops > report.xla_estimate["flops"]
    assert report.model_flops + report.remat_flops == report.flops
    assert sum(report.phase_flops.values()) == report.flops
    assert any(lp.trip_count == 24 for lp in report.loops)
    for lp in report.loops:
        share = report.loop_share(lp)
        assert share is not None and 0 <= share <= 1
    assert report.ratio_to_xla == round(report.flops / report.xla_estimate["flops"], 6)


def test_groupings_partition_the_total(report):
    for by in ("opcode", "computation", "scope", "source"):
        groups = report.group_by(by)
        assert sum(g.total.flops for g in groups) == report.flops, by
        assert sum(g.remat_flops for g in groups) == report.remat_flops, by
        assert sum(g.instructions for g in groups) == len(report.rows), by
        flops = [g.total.flops for g in groups]
        assert flops == sorted(flops, reverse=True), by
    scopes = {g.key for g in report.by_scope(2)}
    assert all(k == NO_SCOPE or k.count("/") <= 1 for k in scopes)
    # a dot fused into a fusion counts as a dot, never as 'fusion'. Every dot of this MLP step
    # contracts an 8x10 and a 10x40 (or their transposes): 2 * 8 * 10 * 40 flops, 24 times.
    dot_rows = [r for r in report.rows if r.opcode == "dot"]
    assert any(r.fusion for r in dot_rows) and any(not r.fusion for r in dot_rows)
    assert all(r.cost.flops == 2 * 8 * 10 * 40 and r.executions == 24 for r in dot_rows)
    by_opcode = {g.key: g for g in report.by_opcode()}
    assert by_opcode["dot"].total.flops == len(dot_rows) * 24 * 2 * 8 * 10 * 40
    assert by_opcode["fusion"].total.flops == 0  # a fusion's own cost excludes what it fuses


def test_rows_have_scope_source_and_phase(report):
    rows = [r for r in report.rows if r.opcode == "dot"]
    assert rows and all(r.phase in ("forward", "backward", "other") for r in rows)
    assert any(r.scope.startswith("jit(train_step)") for r in rows)
    assert any(r.source is not None and r.source.line > 0 for r in rows)
    assert any(r.executions == 24 for r in rows)


def test_to_dict_round_trips_and_to_json_is_stable(report):
    d = report.to_dict(by=("scope", "source", "computation"), depth=3, rows=True)
    assert json.loads(json.dumps(d)) == d
    assert report.to_json() == analyze(REMAT_SCAN).to_json()
    assert json.loads(report.to_json()) == report.to_dict()


def test_to_pandas(report):
    pd = pytest.importorskip("pandas", reason="pandas is optional (installed by the test extra)")
    frame = report.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(report.rows)
    assert int(frame["flops"].sum()) == report.flops
    assert int(frame.groupby("opcode")["flops"].sum()["dot"]) == report.to_dict()["by_opcode"]["dot"]["flops"]


def test_repr_html_and_folded(report):
    page = report._repr_html_()
    assert f"{report.flops:,}" in page and "<table" in page
    for lp in report.loops:
        assert lp.name in page
    folded = report.to_folded()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in folded.splitlines()) == report.flops


def test_file_writers_and_summary(report, tmp_path):
    report.write_folded(str(tmp_path / "f.folded"))
    assert (tmp_path / "f.folded").read_text() == report.to_folded()
    report.write_html(str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").read_text() == report.to_html()
    text = report.summary(by="opcode", top=3)
    assert f"{report.flops:,}" in text and "top 3 of" in text and "by opcode" in text
    assert repr(report).startswith(f"<Report jit_train_step: flops={report.flops:,}")


def test_mfu_uses_model_and_hardware_flops(report):
    m = report.mfu(step_time_s=2e-6, peak_flops_per_s=1e12)
    assert m.num_devices == 1
    assert m.mfu == report.model_flops / (2e-6 * 1e12)
    assert m.hfu == report.flops / (2e-6 * 1e12)
    assert m.hfu >= m.mfu


def test_mfu_devices_from_the_module_header():
    text = "HloModule m, replica_count=2, num_partitions=4\n\nENTRY main {\n  x = f32[4] parameter(0)\n" \
           "  ROOT y = f32[4] add(x, x)\n}\n"
    r = analyze(text)
    assert r.num_devices == 8 and r.flops == 4
    m = r.mfu(step_time_s=1.0, peak_flops_per_s=2.0)
    assert m.num_devices == 8 and m.mfu == 4 / 2.0 and m.achieved_model_flops_per_s == 32.0
    assert r.mfu(1.0, 2.0, num_devices=1).achieved_hardware_flops_per_s == 4.0


def test_trip_count_override_through_api(report):
    loop = max(report.loops, key=lambda lp: lp.total.flops)
    bigger = analyze(REMAT_SCAN, trip_counts={loop.name: loop.trip_count * 2})
    again = next(lp for lp in bigger.loops if lp.name == loop.name)
    assert again.trip_count == loop.trip_count * 2 and again.source == "override"
    assert bigger.flops - report.flops == loop.trip_count * loop.executions * loop.body_cost.flops


# ---- jax objects and XLA's own numbers ----------------------------------------------------------
def _scan_program(steps: int, m: int = 4, k: int = 8):
    import jax
    import jax.numpy as jnp

    def f(x, w):
        def step(carry, _):
            return jnp.tanh(carry @ w), None

        out, _ = jax.lax.scan(step, x, None, length=steps)
        return out.sum()

    return jax.jit(f).lower(jnp.ones((m, k), jnp.float32), jnp.ones((k, k), jnp.float32))


def test_compiled_passed_directly():
    steps, m, k = 7, 4, 8
    lowered = _scan_program(steps, m, k)
    compiled = lowered.compile()
    report = analyze(compiled)
    assert report.flops == analyze(compiled.as_text()).flops
    dots = [lp for lp in report.loops if lp.trip_count == steps]
    assert dots, [(lp.name, lp.trip_count) for lp in report.loops]
    assert report.to_dict()["by_opcode"]["dot"]["flops"] == steps * 2 * m * k * k
    assert report.to_dict()["by_opcode"]["tanh"]["transcendentals"] == steps * m * k
    comparison = compare(compiled)
    xla = compiled.cost_analysis()
    xla = xla[0] if isinstance(xla, list) else xla
    assert comparison.xla["flops"] == xla["flops"]
    assert comparison.estimate_matches == {"flops": True, "transcendentals": True, "bytes_accessed": True}, (
        comparison.estimate, xla)
    # XLA counts the body and the condition once: the difference is the missing (steps - 1) iterations
    # of body + condition, plus the condition's last evaluation (steps + 1 compares, 1 flop each)
    loop = dots[0]
    assert comparison.missed["flops"] == (steps - 1) * loop.executions * loop.body_cost.flops + 1
    assert comparison.by_loop == {loop.name: comparison.missed["flops"], "residual": 0}
    assert comparison.report.xla_reported["flops"] == xla["flops"]
    assert json.loads(comparison.to_json())["estimate_matches"]["flops"] is True


def test_lowered_passed_directly():
    lowered = _scan_program(5)
    report = analyze(lowered)  # the module before XLA's optimizations
    assert any(lp.trip_count == 5 for lp in report.loops)
    assert report.to_dict()["by_opcode"]["dot"]["flops"] == 5 * 2 * 4 * 8 * 8
    comparison = compare(lowered)
    assert comparison.xla["flops"] == lowered.cost_analysis()["flops"]
    assert all(comparison.estimate_matches.values()), (comparison.estimate, comparison.xla)


def test_compare_text_module():
    comparison = compare(FORI)
    assert comparison.report.path == str(FORI)
    assert comparison.estimate_matches["flops"], (comparison.estimate, dict(comparison.xla))
    assert comparison.missed["flops"] == comparison.report.flops - comparison.xla["flops"]
    assert sum(comparison.by_loop.values()) == comparison.missed["flops"]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.hlo")), ids=lambda p: p.name)
def test_compare_every_bundled_example(path):
    """On every bundled module: our reproduction of XLA's number equals XLA's (asked live), and the
    loops explain the whole difference between the exact total and XLA's."""
    comparison = compare(path)
    assert comparison.estimate_matches == {"flops": True, "transcendentals": True, "bytes_accessed": True}, (
        comparison.estimate, {k: comparison.xla[k] for k in ("flops", "transcendentals", "bytes accessed")})
    assert sum(comparison.by_loop.values()) == comparison.missed["flops"]
    assert comparison.by_loop.get("residual", 0) == 0
    report = comparison.report
    assert report.is_exact and not report.uncounted
    if not report.loops:
        assert report.flops == comparison.xla["flops"]
