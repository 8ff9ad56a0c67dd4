"""Every `while` in the shared corpus gets a trip count or an explicit unknown (about 15 s).

The corpus index records, per module, how many while instructions XLA's parser saw and the
`known_trip_count`s XLA wrote; both are checked against what we find."""

from __future__ import annotations

from pathlib import Path

import pytest

import hloparse
from hloflops.loops.tripcount import SOURCES, backend_config_trip_count, infer_trip_count, trip_count

# XLA unit tests whose backend_config was written by hand and disagrees with the loop itself:
# three double-buffering tests annotate 11 on a loop `i < 10` from 0, and the annotator test
# "OverwritesPrePopulatedBackendConfig" pre-populates 99 on purpose (the pass then corrects it).
HAND_WRITTEN_CONFIGS = {
    ("GpuLoopDoubleBufferTransformerTest_ControlDepsCopiedWhenUnro", 11, 10),
    ("GpuLoopDoubleBufferTransformerTest_FullUnrollOddTripCountTes", 11, 10),
    ("GpuLoopDoubleBufferTransformerTest_UnrolledLoopNoControlDeps", 11, 10),
    ("TripCountAnnotatorTest_OverwritesPrePopulatedBackendConfig", 99, 10),
}


@pytest.fixture(scope="module")
def corpus_loops(corpus_dir: Path, corpus_index: list[dict[str, str]]):
    rows = [r for r in corpus_index if int(r["n_while"] or 0) > 0 and r["xla_parses"] == "yes"]
    found = []
    for row in rows:
        module = hloparse.load(corpus_dir / row["file"])
        loops = [(comp, inst) for comp, inst in module.instructions() if inst.opcode == "while"]
        found.append((row, module, loops))
    return found


def test_every_while_gets_a_trip_count_or_an_explicit_unknown(corpus_loops):
    total = 0
    for row, module, loops in corpus_loops:
        assert len(loops) == int(row["n_while"]), row["file"]
        for comp, inst in loops:
            tc = trip_count(module, comp, inst)
            total += 1
            assert tc.source in SOURCES
            if tc.value is None:
                assert tc.source == "unknown" and tc.note and tc.lower >= 0 and tc.upper is None
            else:
                assert tc.value >= 0 and tc.lower == tc.upper == tc.value
    assert total >= 600


def test_xla_known_trip_counts_are_read_and_reproduced(corpus_loops):
    disagreements = set()
    checked = 0
    for row, module, loops in corpus_loops:
        if not row["known_trip_counts"]:
            continue
        expected = sorted(int(n) for n in row["known_trip_counts"].split(";"))
        assert sorted(backend_config_trip_count(inst).value for _, inst in loops
                      if backend_config_trip_count(inst)) == expected, row["file"]
        for comp, inst in loops:
            xla = backend_config_trip_count(inst)
            if xla is None:
                continue
            checked += 1
            ours = infer_trip_count(module, comp, inst)
            if ours.value is not None and ours.value != xla.value:
                stem = row["file"].split("__", 2)[-1]
                disagreements.add((stem.rsplit("__L", 1)[0].split("__")[-1], xla.value, ours.value))
    assert checked >= 30
    # Where our own reading of the loop finds a count, it is XLA's, except where a test wrote
    # a wrong count by hand.
    assert disagreements == HAND_WRITTEN_CONFIGS
