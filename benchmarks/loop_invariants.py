"""The rules of tests/support/invariants.py (issue 29) over many generated loop nests and every
corpus module with a loop or a conditional; prints each nest or module that breaks one.

    python3 benchmarks/loop_invariants.py [--examples 100] [--seed 29] [--no-corpus]

The nests are tests/programs/loop_nests.py's, drawn by the suite's hypothesis strategy from a
seeded random source, each checked as tests/loops/test_invariants_generated.py checks its ten
(XLA compiles the rolled program and its unrolled twins; answers cached on disk)."""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "analysis")]


def corpus_sweep() -> tuple[int, list[str]]:
    import hloparse
    from tests.support.invariants import violations

    corpus = os.path.join(ROOT, "..", "shared", "corpus")
    with open(os.path.join(corpus, "index.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["xla_parses"] == "yes"]
    checked, broken = 0, []
    for row in rows:
        text = open(os.path.join(corpus, row["file"]), encoding="utf-8").read()
        if not int(row["n_while"] or 0) and "conditional(" not in text:
            continue
        checked += 1
        found = violations(hloparse.parse(text))
        if found:
            broken.append(f"{row['file']}: {'; '.join(found)}")
    return checked, broken


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=100)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--no-corpus", action="store_true")
    args = ap.parse_args()
    from tests.loops.test_invariants_generated import check_nest, nests

    if not args.no_corpus:
        start = time.time()
        checked, broken = corpus_sweep()
        print(f"corpus: {checked} modules with a loop or a conditional, {len(broken)} break a rule "
              f"({time.time() - start:.0f} s)")
        for line in broken:
            print("  " + line)
    drawn = _draws(nests(), args.examples, args.seed)
    broken_nests, depths = [], {1: 0, 2: 0, 3: 0}
    start = time.time()
    for nest in drawn:
        depths[len(nest.levels)] += 1
        try:
            check_nest(nest)
        except AssertionError as error:
            broken_nests.append(f"{nest}: {str(error)[:400]}")
        except Exception:  # noqa: BLE001  (a crash is a broken rule too: print it)
            broken_nests.append(f"{nest}: {traceback.format_exc(limit=3)[-600:]}")
    print(f"generated: {len(drawn)} distinct nests of {args.examples} draws "
          f"(depth 1: {depths[1]}, 2: {depths[2]}, 3: {depths[3]}), "
          f"{len(broken_nests)} break a rule ({time.time() - start:.0f} s)")
    for line in broken_nests:
        print("  " + line)


def _draws(strategy, count: int, seed: int) -> list:
    """`count` examples of a hypothesis strategy, explored as @given explores them, seeded."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def take(value):
        if value not in found:
            found.append(value)

    take()
    return found


if __name__ == "__main__":
    main()
