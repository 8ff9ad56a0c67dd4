"""Issue 29: every number of a report adds up where loops, unknown trip counts and conditionals meet.

The rules (tests/support/invariants.py): the formula evaluated at any counts equals the
accounting given those counts, and at the lower bounds the totals; the reconciliation adds up to
exact - XLA, each loop's "XLA misses" within [0, its total]; the bounds hold the totals. Each case
the issue reported is a test here; the whole corpus is swept by `test_corpus_keeps_the_rules`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

import hloparse
from hloflops.accounting import RESIDUAL, account
from hloflops.report.report import Report
from hloflops.report.text import render_summary
from tests.support.invariants import check, reconciliation_violations, violations

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from tests.programs import Program  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402
from tests.support.batch_fixtures import schema_1_database  # noqa: E402

S = jax.ShapeDtypeStruct
W, H, N = S((64, 64), jnp.float32), S((8, 64), jnp.float32), S((), jnp.int32)
DOT = 2 * 8 * 64 * 64


def _cond_step(i, h, w):
    h = lax.cond(i % 2 == 0, lambda h: jnp.tanh(h @ w), lambda h: h * 2.0, h)
    return lax.switch(i % 4, [lambda h: h @ w, jnp.exp, lambda h: h + 1.0, lambda h: (h @ w) @ w], h)


def counter_then_runtime(w, h, n):
    """The issue's program: fori_loop(10) with a cond and a switch on the counter, then a
    while_loop whose bound is the runtime argument n."""
    h = lax.fori_loop(0, 10, lambda i, h: _cond_step(i, h, w), h)
    return lax.fori_loop(0, n, lambda i, h: jnp.tanh(h @ w), h)


def counter_then_runtime_twin(n: int):
    def run(w, h):
        for i in range(10):
            h = jnp.tanh(h @ w) if i % 2 == 0 else h * 2.0
            h = [lambda h: h @ w, jnp.exp, lambda h: h + 1.0, lambda h: (h @ w) @ w][i % 4](h)
        for _ in range(n):
            h = jnp.tanh(h @ w)
        return h
    return run


@functools.lru_cache(maxsize=None)
def issue_program(stage: str):
    compiled, lowered, _ = compile_program(Program("issue29_counter_then_runtime", counter_then_runtime, (W, H, N)))
    module = hloparse.parse(compiled if stage == "optimized" else lowered)
    return module, account(module)


@functools.lru_cache(maxsize=None)
def twin(n: int):
    compiled, _, xla = compile_program(Program(f"issue29_counter_then_runtime_twin_{n}",
                                               counter_then_runtime_twin(n), (W, H)))
    return account(hloparse.parse(compiled)), xla


def dots(acc) -> int:
    return sum(r.total.flops for r in acc.rows if r.opcode == "dot")


def _runtime_loop(acc) -> str:
    (name,) = acc.formula.names
    return name


@pytest.mark.parametrize("stage", ["optimized", "before"])
def test_issue_formula_equals_the_accounting_at_every_count(stage):
    module, acc = issue_program(stage)
    formula, name = acc.formula, _runtime_loop(acc)
    assert formula.at_lower_bounds().as_dict() == {m: getattr(acc.total, m) for m in
                                                   ("flops", "transcendentals", "bytes_accessed")}
    for n in (0, 1, 3, 7):
        at = account(module, trip_counts={name: n})
        assert formula.evaluate({name: n}).as_dict() == {"flops": at.total.flops, "transcendentals":
                                                         at.total.transcendentals,
                                                         "bytes_accessed": at.total.bytes_accessed}
        assert formula.polynomial_at({name: n}) == formula.evaluate({name: n})  # the printed polynomial too


@pytest.mark.parametrize("n", [0, 7])
def test_issue_formula_at_n_is_the_unrolled_twin(n):
    module, acc = issue_program("optimized")
    name = _runtime_loop(acc)
    unrolled, xla = twin(n)
    assert unrolled.total.flops == int(xla["flops"]) and not unrolled.loops
    at = account(module, trip_counts={name: n})
    assert dots(at) == dots(unrolled)
    assert at.total.transcendentals == unrolled.total.transcendentals == int(xla.get("transcendentals", 0))
    assert acc.formula.evaluate({name: n}).transcendentals == unrolled.total.transcendentals


def test_issue_xla_misses_within_the_loop_total_and_rows_add_up():
    module, acc = issue_program("optimized")
    assert reconciliation_violations(acc) == []
    known = [lp for lp in acc.loops if lp.trip_count == 10]
    assert known and 0 <= acc.reconciliation[known[0].name] <= known[0].total.flops


def test_issue_summary_reconciliation_rows_sum_to_exact_minus_xla():
    """The summary shows every reconciliation entry (loops, conditionals, residual) as a row,
    and they add up to exact - XLA as printed."""
    module, acc = issue_program("optimized")
    text = render_summary(Report(acc, module=module))
    block = text.split("reconciliation with XLA")[1].split("\n\n")[0]
    values = {}
    for line in block.splitlines()[2:]:  # the title's end, the header
        found = re.match(r"^  (\S.*?)\s{2,}(-?[\d,]+)(\s|$)", line)
        assert found, line
        values[found.group(1)] = int(found.group(2).replace(",", ""))
    exact_minus_xla = acc.total.flops - int(acc.xla_estimate["flops"])
    assert values.pop("= exact - XLA") == exact_minus_xla
    assert sum(values.values()) == exact_minus_xla
    assert set(values) == set(acc.reconciliation)
    for c in acc.conditionals:
        assert c.name in values


def clamped_counter_cond(w, h, n):
    """A conditional on the counter of a loop whose count is a runtime value clamped to [3, 8]."""
    def body(i, h):
        return lax.cond(i % 2 == 0, lambda h: jnp.tanh(h @ w), lambda h: h * 2.0, h)
    return lax.fori_loop(0, jnp.clip(n, 3, 8), body, h)


def test_counter_conditional_in_a_loop_of_proved_lower_bound():
    """The totals count the 3 certain trips with the branches they take (before: the dearest
    branch on each, above what any execution of 3 trips runs); the polynomial is an upper bound
    beyond them, marked, and evaluate() is the accounting at each count."""
    compiled, _, _ = compile_program(Program("issue29_clamped_counter_cond", clamped_counter_cond,
                                             (S((8, 8), jnp.float32), S((4, 8), jnp.float32), N)))
    module = hloparse.parse(compiled)
    acc = account(module)
    (name,) = acc.formula.names
    assert acc.formula.symbols[0].lower == 3 and acc.formula.upper_bound
    check(module, acc)
    for n in (3, 5, 8):
        exact = account(module, trip_counts={name: n}).total
        assert acc.formula.evaluate({name: n}).flops == exact.flops <= acc.formula.polynomial_at({name: n}).flops
    assert "<=" in render_summary(Report(acc, module=module))


def runtime_counter_cond(w, h, n):
    def body(i, h):
        return lax.cond(i % 2 == 0, lambda h: jnp.tanh(h @ w), lambda h: h * 2.0, h)
    return lax.fori_loop(0, n, body, h)


def test_counter_conditional_of_an_unknown_loop_is_said_so_not_data():
    """No trip is certain: the conditional stays unresolved, but the summary, the JSON and the
    batch's range reason name the loop whose count decides it, not data."""
    from hloflops.batch.worker import range_reason_of

    compiled, _, _ = compile_program(Program("issue29_runtime_counter_cond", runtime_counter_cond,
                                             (S((8, 8), jnp.float32), S((4, 8), jnp.float32), N)))
    module = hloparse.parse(compiled)
    acc = account(module)
    (name,) = acc.formula.names
    (cond,) = acc.conditionals
    assert cond.waits_on == name and acc.formula.upper_bound
    check(module, acc)
    report = Report(acc, module=module)
    assert "on the counter of a loop of unknown trip count" in report.summary()
    assert "decided at run time" not in report.summary()
    as_json = report.to_dict()
    assert as_json["conditionals"][0]["waits_on"] == name and as_json["formula_upper_bound"] is True
    assert "on the counter of a loop of unknown trip count" in range_reason_of(as_json)


# ---- corpus modules the issue named ----------------------------------------------------------

def _corpus_module(corpus_dir: Path, fragment: str):
    (path,) = [p for p in corpus_dir.glob(f"*/*{fragment}*.hlo")]
    return hloparse.parse(path.read_text())


@pytest.mark.parametrize("fragment, counts, flops", [
    # two whiles named "while", one inside the other: the override names both, N x N trips
    ("CopyInsertionTest_NestedWhiles__", {"while": 3}, 9),
    # while1 / while2 in B and again in C, C the body of B's loops
    ("FlattenCallGraphTest_SkipCloningForCalls_NonFlatChainTwoSucc", {"while1": 3, "while2": 3}, None),
    ("CopyInsertionTest_NestedWhilesWithParamRoot2", {"while.inner": 3, "while.outer": 3}, None),
])
def test_nested_unknown_whiles_have_their_product_terms(corpus_dir, fragment, counts, flops):
    module = _corpus_module(corpus_dir, fragment)
    acc = account(module)
    want = account(module, trip_counts=counts).total
    assert acc.formula.evaluate(counts).flops == want.flops
    assert acc.formula.polynomial_at(counts).as_dict() == acc.formula.evaluate(counts).as_dict()
    if flops is not None:
        assert want.flops == flops


@pytest.mark.parametrize("fragment", [
    "GpuLoopDoubleBufferTransformerTest_NestedWhileLoopRemainsFla",  # 10 trips, an unknown loop inside
    "CollectivePipelinerTest_OverlapAllGatherWithInnerWhileThroug",
    "WhileLoopUnrollerTest_SymmetricMatMul",
    # two loops named "while", one inside the other: one reconciliation entry holds both rows
    "ScanLoopAccumulatorInputUnificationTest_AccumulatorAllocateO",
])
def test_xla_misses_never_exceed_the_loop_total(corpus_dir, fragment):
    module = _corpus_module(corpus_dir, fragment)
    assert reconciliation_violations(account(module)) == []


def _with_loop_or_conditional(corpus_dir: Path, rows: list[dict[str, str]]) -> list[Path]:
    found = []
    for row in rows:
        if row["xla_parses"] != "yes":
            continue
        path = corpus_dir / row["file"]
        if int(row["n_while"] or 0) or "conditional(" in path.read_text():
            found.append(path)
    return found


def test_corpus_keeps_the_rules(corpus_dir, corpus_index):
    """Every corpus module XLA parses with a while or a conditional (556 of them, ~10 s)."""
    paths = _with_loop_or_conditional(corpus_dir, corpus_index)
    assert len(paths) > 400
    broken = {}
    for path in paths:
        found = violations(hloparse.parse(path.read_text()))
        if found:
            broken[path.name] = found
    assert broken == {}


def test_checker_catches_a_broken_reconciliation():
    """The checker itself fails on a report that does not add up (not a test that cannot fail)."""
    module, acc = issue_program("optimized")
    from dataclasses import replace

    wrong = replace(acc, reconciliation={**acc.reconciliation, RESIDUAL: acc.reconciliation[RESIDUAL] + 1})
    with pytest.raises(AssertionError):
        check(module, wrong)
    assert np.isfinite(acc.total.flops)


# ---- the same numbers in every output ------------------------------------------------------------

def test_every_output_carries_the_same_formula_and_misses(tmp_path):
    """Summary, JSON, CSV, HTML and the batch database (an older database gains the formula
    column) show the formula and each loop's XLA misses as the accounting has them."""
    import json

    from hloflops.api import analyze
    from hloflops.batch.db import ResultsDB, export
    from hloflops.batch.run import run_batch
    from hloflops.report.formulas import formula_lines, polynomial_text
    from hloflops.report.html import render_html

    compiled, _, _ = compile_program(Program("issue29_counter_then_runtime", counter_then_runtime, (W, H, N)))
    path = tmp_path / "prog.hlo"
    path.write_text(compiled)
    report = analyze(str(path))
    as_json = report.to_dict()
    flops_text = polynomial_text(report.formula.metric_terms("flops"))
    assert f"flops = {flops_text}" in report.summary()
    page = render_html(report)
    for line in formula_lines(report.formula)[1:]:
        assert line.strip().replace(">", "&gt;").replace("<", "&lt;") in page
    misses = {lp.name: lp.extra_over_xla.flops for lp in report.loops}
    assert {lp["name"]: lp["extra_over_xla"]["flops"] for lp in as_json["loops"]} == misses
    for name, value in misses.items():
        if report.accounting.reconciliation[name] == value and value >= 0:
            assert f"{value:,}" in page
    db = tmp_path / "old.sqlite"
    schema_1_database(db)  # a database from before the formula column
    run_batch([path], db=db, processes=1, timeout_s=120, progress=False)
    with ResultsDB(db) as results:
        (row,) = results.module_rows()
        export(results, tmp_path / "out.csv")
        export(results, tmp_path / "out.jsonl")
    formula = json.loads(row["formula"])
    for key in ("flops_formula", "transcendentals_formula", "bytes_accessed_formula", "formula_symbols",
                "formula_bounds", "formula_notes"):
        assert formula[key] == as_json[key]
    assert {lp["name"]: lp["xla_misses"] for lp in json.loads(row["loops"])} == misses
    (line,) = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert line["formula"]["flops_formula"] == as_json["flops_formula"]
    with open(tmp_path / "out.csv", newline="") as f:
        (csv_row,) = list(__import__("csv").DictReader(f))
    assert json.loads(csv_row["formula"])["flops_formula"] == as_json["flops_formula"]
