"""No output moves by accident: `to_dict()` of every corpus module and bundled example equals
the recorded golden file (tests/support/golden_outputs.py says how to rewrite it on purpose)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.golden_outputs import module_paths, outputs_of, read_golden


@pytest.mark.slow
def test_every_output_equals_the_recorded_one(corpus_dir: Path) -> None:
    golden = read_golden()
    seen, differences = set(), []
    for key, path in module_paths():
        seen.add(key)
        now = outputs_of(key, path)
        if golden.get(key) != now:
            differences.append(f"{key}: recorded {golden.get(key)}, now {now}")
    missing = sorted(set(golden) - seen)
    assert not missing, f"{len(missing)} recorded modules are gone, e.g. {missing[:3]}"
    assert not differences, f"{len(differences)} of {len(seen)} outputs changed:\n" + "\n".join(differences[:20])
