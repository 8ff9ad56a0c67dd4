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
