"""Differential fuzz of hloparse against XLA's parser: corpus modules mutated (a line deleted or
duplicated, a character deleted or inserted, a number changed, tokens swapped, text cut short,
an attribute dropped), each given to both; prints every disagreement, grouped.

    python3 benchmarks/xla_differential_fuzz.py [--count 2000] [--seed 12] [--max-bytes 3000]

The suite runs a fixed sample of the same (`tests/untrusted/test_hostile_xla_acceptance.py`)."""

from __future__ import annotations

import argparse
import collections
import csv
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.xla_oracle import mutants, our_verdict, xla_verdicts  # noqa: E402


def seed_modules(max_bytes: int, every: int = 10) -> list[str]:
    corpus = os.path.join(ROOT, "..", "shared", "corpus")
    with open(os.path.join(corpus, "index.csv"), newline="") as f:
        rows = sorted((r for r in csv.DictReader(f)
                       if r["xla_parses"] == "yes" and 200 <= int(r["bytes"]) <= max_bytes), key=lambda r: r["file"])
    return [open(os.path.join(corpus, r["file"]), encoding="utf-8").read() for r in rows[::every]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--max-bytes", type=int, default=3000)
    args = ap.parse_args()
    texts = mutants(seed_modules(args.max_bytes), args.count, args.seed)
    xla = xla_verdicts(texts)
    groups: dict[str, list[tuple[int, str, str]]] = collections.defaultdict(list)
    agree = 0
    for i, (text, theirs) in enumerate(zip(texts, xla)):
        ours = our_verdict(text)
        if (ours == "accept") == (theirs == "accept"):
            agree += 1
            continue
        key = "we accept, XLA rejects" if ours == "accept" else "we reject, XLA accepts"
        groups[key].append((i, ours[:200], theirs[:200]))
    print(f"{agree} of {len(texts)} agree ({agree / len(texts):.1%})")
    for key, items in groups.items():
        print(f"\n{key}: {len(items)}")
        for i, ours, theirs in items[:40]:
            print(f"  #{i}\n    us:  {ours}\n    XLA: {theirs}")


if __name__ == "__main__":
    main()
