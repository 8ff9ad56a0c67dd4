"""The unnamed narrow ending a type-corrected elementwise chain follows the chain's last op where
the chain reads one value back from the host (analysis/hloflops/remat/corrected_narrows.py).

Unseen TPU draw 451 (a Linen loop of two LM blocks, save_and_offload_only_these_names, FSDP, bf16):
the backward recomputes gelu's `x * 0.5 * (1 + tanh(...))` in f32 from the offloaded `h` (one bf16
parameter, widened) and narrows it for the weight gradient's matmul, nested in that matmul's
fusion as the program without remat nests its own. The offload rule took the chain's last multiply
out of remat (hloflops.remat.offloaded_residuals), but its narrow, paired by signature, stayed a sure
share: the multiply reads the widen of the parameter, not the parameter, and the rule looked only
at the op's own operands. Convert +526,336 with a truth of 0, the low end 524,288 above it. The
narrow now follows the multiply: in range, the low end 0.
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_narrow_of_an_offloaded_gelu_chain_follows_its_last_op(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(451, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert outcome.in_bounds("after"), outcome.describe()
    assert sum(after.truth.values()) == 0, outcome.describe()
    assert after.reported.get("convert", 0) <= 2_048, outcome.describe()  # softmax's `1 / (s * s)` narrows: weak
    assert outcome.all_ok("before"), outcome.describe()
