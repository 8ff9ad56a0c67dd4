"""The reconciliation residual, explained (hloflops.xla.residual): its causes sum to it, and each
is proved where XLA can be asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from hloflops import analyze
from hloflops.xla.residual import CAUSES

CUBLAS_LT = Path("xla_cc_gpu") / "backends__gpu__autotuner__cublaslt_test__kCublasLtCustomCallHlo__L49.hlo"

# A loop-free module whose flops XLA sums in float32: 2 x 1001^3 dot flops, then 1001^2 adds.
ROUNDED = """HloModule rounded
ENTRY e {
  a = f32[1001,1001]{1,0} parameter(0)
  b = f32[1001,1001]{1,0} parameter(1)
  d = f32[1001,1001]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[1001,1001]{1,0} add(d, a)
}
"""


def test_float32_rounding_is_the_whole_residual_of_a_loop_free_module() -> None:
    report = analyze(ROUNDED)
    residual = report.accounting.reconciliation["residual"]
    assert report.flops == 2 * 1001**3 + 1001**2
    assert residual == report.flops - int(report.xla_estimate["flops"]) != 0
    assert report.residual_causes == {"conditionals": 0, "exact_view": 0, "float32_rounding": residual,
                                      "unexplained": 0}
    assert report.to_dict()["residual_causes"]["float32_rounding"] == residual
    assert f"{residual:,} flops: {residual:,} float32 rounding of XLA's sums" in report.summary()
    pytest.importorskip("jax")
    from hloflops.xla.compare import xla_cost_of_text

    assert int(xla_cost_of_text(ROUNDED)["flops"]) == int(report.xla_estimate["flops"])  # XLA's own float32 sum


def test_custom_calls_xla_counts_minus_one_are_the_exact_view_cause(corpus_dir: Path) -> None:
    report = analyze(corpus_dir / CUBLAS_LT)
    custom = [r for r in report.rows if r.opcode == "custom-call"]
    assert custom and not report.uncounted
    residual = report.accounting.reconciliation["residual"]
    # XLA charges each custom-call -1; we charge its gemm.
    assert report.residual_causes["exact_view"] == sum(r.total.flops + r.executions for r in custom) == residual
    assert sum(report.residual_causes.values()) == residual


def test_no_residual_no_causes() -> None:
    report = analyze("HloModule m\nENTRY e {\n  a = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(a)\n}\n")
    assert report.accounting.reconciliation["residual"] == 0
    assert report.residual_causes == {} and "residual_causes" not in report.to_dict()
    assert set(CAUSES) == {"conditionals", "exact_view", "float32_rounding", "unexplained"}


def _count_passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The views of every pass of the engine (hloflops.engine.Evaluation) made from now on."""
    from hloflops import engine

    passes: list[str] = []
    build = engine.Evaluation.__init__

    def counted(self, module, **options) -> None:  # type: ignore[no-untyped-def]
        passes.append(options.get("view", "exact"))
        build(self, module, **options)

    monkeypatch.setattr(engine.Evaluation, "__init__", counted)
    return passes


def test_the_summary_json_and_html_run_the_engine_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The residual's causes were split by costing the module again in XLA's view; where no
    # instruction costs differently in the two views, the one pass already holds that total.
    passes = _count_passes(monkeypatch)
    report = analyze(ROUNDED)
    report.summary(), report.to_json(), report.to_html()
    assert report.residual_causes["float32_rounding"] == report.accounting.reconciliation["residual"] != 0
    assert passes == ["exact"]


def test_a_module_whose_views_differ_is_costed_in_xla_view_for_its_causes(monkeypatch: pytest.MonkeyPatch,
                                                                          corpus_dir: Path) -> None:
    from hloflops.xla.estimate import loop_once_totals

    passes = _count_passes(monkeypatch)
    report = analyze(corpus_dir / CUBLAS_LT)
    causes = report.residual_causes
    assert passes == ["exact", "xla"]  # custom-calls: XLA's -1 is not our cost
    exact, xla = loop_once_totals(report.module, "exact")[0], loop_once_totals(report.module, "xla")[0]
    assert causes["exact_view"] == exact.flops - xla.flops
