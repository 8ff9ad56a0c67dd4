"""utpu draw 224 replayed (python loop of a bf16 relu MLP, save_and_offload_only_these_names, FSDP):
an activation gathered in windows twice, its bf16 concatenations and partial sums float-type
corrected (hloflops.remat.twice_windowed_gathers), and the narrow of a host-read relu recomputed in
a weight gradient's fusion (hloflops.remat.corrected_narrows).

Before: maximum -384 (the concatenations in loop fusions of their own, which the conv-input packing
rule gave their matmul's model flag), add -1,536 and converts missed (the sums' `convert(add(convert,
convert))`), and the relu's narrow counted (convert +384) where the program without remat narrows
its own relu alike: the twin's relu reads its operand widened (`max(convert(p), convert(0))`).
Now every maximum and add is exact; what is left is the program without remat's own duplicate of
the loss cotangent (multiply and convert of 16 elements) and the windows' offset arithmetic.
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_windows_gathered_twice_in_bf16_and_a_host_read_relu_narrow(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(224, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    for opcode in ("maximum", "add"):
        assert after.reported.get(opcode, 0) == after.truth.get(opcode, 0), outcome.describe()
    # The twin's duplicated loss-cotangent convert (16 elements) less one offset convert.
    assert after.reported.get("convert", 0) - after.truth.get("convert", 0) == 15, outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
