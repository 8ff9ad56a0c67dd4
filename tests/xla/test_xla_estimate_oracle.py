"""The XLA oracle used by the corpus tests: XLA is asked in child processes, an XLA abort is an
answer ("XLA aborted") for that text only, and cached answers are reused until deleted."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("jax")

from hloflops.xla.compare import xla_cost_of_text, xla_costs_of_texts  # noqa: E402

GOOD = "HloModule m\nENTRY e {\n  a = f32[8] parameter(0)\n  ROOT n = f32[8] negate(a)\n}\n"
ABORTS = ("HloModule m\nENTRY e {\n  p0 = (f32[], f32[]) parameter(0)\n  p1 = (f32[], f32[]) parameter(1)\n"
          "  p2 = pred[] parameter(2)\n  ROOT s = (f32[], f32[]) select(p2, p0, p1)\n}\n")  # XLA CHECK-fails
REJECTED = "HloModule m\nENTRY e {\n  ROOT n = f32[8] no-such-op()\n}\n"


def test_aborts_and_rejections_are_answers_for_that_text_only(tmp_path):
    texts = {"a": GOOD, "b": ABORTS, "c": REJECTED, "d": GOOD.replace("f32[8]", "f32[16]")}
    answers = xla_costs_of_texts(texts, cache_dir=str(tmp_path))
    assert answers["a"]["flops"] == 8.0 and answers["d"]["flops"] == 16.0
    assert answers["b"] == "XLA aborted"
    assert answers["c"].startswith("XLA rejected")
    assert len(os.listdir(tmp_path)) == 4
    # cached answers come back unchanged; deleting the cache asks XLA again
    assert xla_costs_of_texts(texts, cache_dir=str(tmp_path)) == answers
    for name in os.listdir(tmp_path):
        os.remove(tmp_path / name)
    assert xla_costs_of_texts({"a": GOOD}, cache_dir=str(tmp_path)) == {"a": answers["a"]}
    assert answers["a"] == xla_cost_of_text(GOOD)
