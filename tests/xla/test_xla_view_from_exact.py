"""View "xla" of the engine built from the exact pass (`Evaluation(..., base=)`, what `evaluate`
does when the residual's causes ask for XLA's view): only the instructions whose charge has an
exact view of its own are costed again, and the result is the full pass's, instruction by
instruction, on every corpus module where the two views can differ."""

from __future__ import annotations

from pathlib import Path

import pytest

import hloparse
from hloflops import analyze
from hloflops.engine import Evaluation

CUBLAS_LT = Path("xla_cc_gpu") / "backends__gpu__autotuner__cublaslt_test__kCublasLtCustomCallHlo__L49.hlo"
# What makes the views differ: custom-calls (XLA's -1), kCustom gather/scatter fusions (XLA never
# looks inside), ragged dots, unbounded dimensions (where the exact pass is not reused).
DIFFERING = ("custom-call", "kCustom", "ragged-dot", "[?")


def _differing_modules(corpus_dir: Path) -> list[Path]:
    paths = []
    for path in sorted(corpus_dir.rglob("*.hlo")):
        if "_malformed" in path.parts:
            continue
        text = path.read_text(errors="replace")
        if any(word in text for word in DIFFERING):
            paths.append(path)
    return paths


def test_the_xla_view_from_the_exact_pass_is_the_full_pass_on_the_corpus(corpus_dir: Path) -> None:
    compared = reused = 0
    for path in _differing_modules(corpus_dir):
        try:
            module = hloparse.load(str(path))
            base = Evaluation(module)
        except Exception:  # modules our parser or rules refuse are tested elsewhere
            continue
        full = Evaluation(module, view="xla")
        from_base = Evaluation(module, view="xla", base=base)
        assert from_base.exact == full.exact, path
        assert from_base.applied == full.applied, path
        compared += 1
        reused += bool(base.differing)
    assert compared > 300 and reused > 300, (compared, reused)  # the corpus has ~600 such modules


def test_the_causes_cost_only_the_differing_instructions_again(monkeypatch: pytest.MonkeyPatch,
                                                               corpus_dir: Path) -> None:
    from hloflops import engine
    from hloflops.xla.estimate import loop_once_total

    charged: list[tuple[str, str]] = []
    original = engine.Evaluation._charged

    def counted(self, comp, inst, *args):  # type: ignore[no-untyped-def]
        charged.append((self.view, inst.opcode))
        return original(self, comp, inst, *args)

    monkeypatch.setattr(engine.Evaluation, "_charged", counted)
    report = analyze(corpus_dir / CUBLAS_LT)
    causes = report.residual_causes
    again = [op for view, op in charged if view == "xla"]
    assert again and set(again) == {"custom-call"}  # the full pass charged every kind of instruction
    full = Evaluation(report.module, view="xla")
    assert causes["exact_view"] == (loop_once_total(report.module, engine.evaluate(report.module).exact).flops
                                    - loop_once_total(report.module, full.exact).flops) != 0
