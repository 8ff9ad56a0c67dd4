"""Two runs of the remat sweep compared seed by seed: what a change to a rule moved.

    python3 benchmarks/remat_compare.py OLD.jsonl NEW.jsonl [--stage after|before] [--all]

Both files are `benchmarks/remat_sweep.py --jsonl` records of the same draws (one line per draw and
stage). Prints each run's counts (every opcode exact, truth in range, attainable, the sum over draws
of |reported - truth| per opcode, exact draws that print a range) and every draw that moved: WORSE
where it lost exactness or its range or its misses grew, better where the reverse, `wider` where an
exact draw's range grew. `--all` also lists draws whose misses changed without growing or shrinking.
Exits 1 when some draw is worse, so a script can stop on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(path: Path, stage: str) -> dict[int, dict]:
    records = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["stage"] == stage:
            records[record["seed"]] = record
    return records


def miss(record: dict) -> int:
    return sum(abs(v) for v in record["misses"].values())


def width(record: dict) -> int:
    return record["bounds"][1] - record["bounds"][0] if record["bounds"] else 0


def counts(records: dict[int, dict]) -> str:
    exact = [r for r in records.values() if r["ok"]]
    return (f"{len(exact)} exact, {sum(r['in_bounds'] for r in records.values())} in range, "
            f"{sum(r['attainable'] for r in records.values())} attainable of {len(records)}; "
            f"sum |miss| {sum(miss(r) for r in records.values()):,}; "
            f"exact with a range {sum(1 for r in exact if width(r))}")


def verdict(old: dict, new: dict) -> str | None:
    if (old["ok"] and not new["ok"]) or (old["in_bounds"] and not new["in_bounds"]) or miss(new) > miss(old):
        return "WORSE"
    if (new["ok"] and not old["ok"]) or (new["in_bounds"] and not old["in_bounds"]) or miss(new) < miss(old):
        return "better"
    if new["ok"] and width(new) > width(old):
        return "wider"
    if new["misses"] != old["misses"] or new["bounds"] != old["bounds"]:
        return "moved"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--stage", default="after", choices=("after", "before"))
    parser.add_argument("--all", action="store_true", help="also list draws whose misses or bounds moved sideways")
    args = parser.parse_args()
    old, new = load(args.old, args.stage), load(args.new, args.stage)
    print(f"old: {counts(old)}\nnew: {counts(new)}")
    missing = sorted(old.keys() ^ new.keys())
    if missing:
        print(f"in one run only: {missing}")
    worse = 0
    for seed in sorted(old.keys() & new.keys()):
        a, b = old[seed], new[seed]
        kind = verdict(a, b)
        if kind is None or (kind == "moved" and not args.all):
            continue
        worse += kind == "WORSE"
        print(f"{kind} {seed} {b['row']}: exact {a['ok']} -> {b['ok']}, in range {a['in_bounds']} -> "
              f"{b['in_bounds']}, |miss| {miss(a):,} -> {miss(b):,}, truth {b['truth']:,}, bounds "
              f"{a['bounds']} -> {b['bounds']}\n    {a['misses']}\n -> {b['misses']}")
    return 1 if worse else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # read through `head`: the reader has what it wanted
        sys.stderr.close()
        sys.exit(0)
