"""Reading an HloModuleProto without jax (`hloparse.proto_text`, issue 31): corpus modules turned
into protos by XLA (`hlo_module_from_text(text).as_serialized_hlo_module_proto()`), printed by
the wire reader and analysed, give the numbers of their text; a field the reader does not know is
an error that names it, never a module analysed without it."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

import hloflops
from hloparse.proto_text import UnsupportedProto, module_text

pytest.importorskip("jax")
SAMPLE = 150
TRAIN_STEP = Path(__file__).resolve().parents[1] / "data" / "tpu" / "train_step_v5e.hlo"


def _numbers(report) -> tuple:  # noqa: ANN001
    return (report.flops, report.transcendentals, report.bytes_accessed, report.model_flops, report.remat_flops,
            sorted(-1 if lp.trip_count is None else lp.trip_count for lp in report.loops))  # XLA renames, reorders


def _proto(text: str) -> bytes:
    from hloflops.xla.compare import hlo_module_from_text

    return hlo_module_from_text(text).as_serialized_hlo_module_proto()


def test_corpus_sample_same_numbers_or_a_named_field(corpus_dir: Path, corpus_index: list[dict[str, str]]) -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    rows = sorted((r for r in corpus_index if r["xla_parses"] == "yes" and int(r["bytes"]) < 200_000),
                  key=lambda r: r["file"])
    random.Random(31).shuffle(rows)
    same, unsupported = 0, []
    for row in rows[:SAMPLE]:
        text = (corpus_dir / row["file"]).read_text()
        try:
            printed = module_text(_proto(text))
        except UnsupportedProto as e:
            assert "not read without jax" in str(e) or "no instruction" in str(e), str(e)
            unsupported.append(str(e))
            continue
        assert _numbers(hloflops.analyze(printed)) == _numbers(hloflops.analyze(text)), row["file"]
        same += 1
    assert same >= 0.85 * SAMPLE, (same, unsupported)


def test_tpu_train_step_without_jax() -> None:
    text = TRAIN_STEP.read_text()
    printed = hloflops.analyze(module_text(_proto(text)))
    assert _numbers(printed) == _numbers(hloflops.analyze(text)) and printed.module_name == "jit_train_step"


def test_an_unknown_field_is_named() -> None:
    text = "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"
    proto = _proto(text)
    # append field 2047 (varint) to the module: a field from a newer XLA
    extra = bytes([0xF8, 0x7F, 0x01])
    with pytest.raises(UnsupportedProto, match="HloModuleProto: field 2047 is not read without jax"):
        module_text(proto + extra)
