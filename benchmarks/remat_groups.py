"""Group the failing draws of a remat sweep result by what they miss, to pick the rule to look
at next (issue 28): reads the failing-draw list that benchmarks/remat_sweep.py writes and prints,
per stage, the draws grouped by the opcodes they miss beyond the loop-counter tolerance
(tests/remat/judge.py), the biggest group first.

    python3 benchmarks/remat_groups.py benchmarks/results/remat_sweep.md [--stage after]
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import defaultdict
from pathlib import Path

COUNTER_OPCODES = frozenset({"add", "subtract", "compare", "select"})
LOOP_TOLERANCE = 64
REPLAY = re.compile(r"\s*seed (\d+): replay: check\(Form\((.*)\)\)")
VERDICT = re.compile(r"\[(after|before)\]: .*per opcode reported-truth (\{.*?\}); twin remat [\d,]+; loops (\d+)")


def failing(text: str, stage: str) -> list[tuple[int, str, dict[str, int]]]:
    """(seed, form fields, misses) of the draws failing at `stage`."""
    out, seed, fields = [], None, ""
    for line in text.splitlines():
        replay = REPLAY.match(line)
        if replay:
            seed, fields = int(replay.group(1)), replay.group(2)
            continue
        verdict = VERDICT.search(line)
        if verdict is None or seed is None or verdict.group(1) != stage:
            continue
        misses, loops = ast.literal_eval(verdict.group(2)), int(verdict.group(3))
        counters = sum(abs(v) for k, v in misses.items() if k in COUNTER_OPCODES)
        if any(k not in COUNTER_OPCODES for k in misses) or counters > LOOP_TOLERANCE * loops:
            out.append((seed, fields, misses))
    return out


def pattern(misses: dict[str, int]) -> str:
    """The opcodes a draw misses, with the sign of each (`+` over-reported, `-` missed)."""
    return " ".join(f"{op}{'+' if v > 0 else '-'}" for op, v in sorted(misses.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("result", type=Path)
    parser.add_argument("--stage", default="after", choices=("after", "before"))
    args = parser.parse_args()
    groups: dict[str, list[tuple[int, str, dict[str, int]]]] = defaultdict(list)
    draws = failing(args.result.read_text(), args.stage)
    for draw in draws:
        groups[pattern(draw[2])].append(draw)
    print(f"{len(draws)} draws fail every opcode {args.stage} optimization, {len(groups)} patterns")
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{len(members)} x {key}")
        for seed, fields, misses in members:
            form = re.search(r"form='(\w+)'", fields)
            arch = re.search(r"arch='(\w+)'", fields)
            dtype = re.search(r"dtype='(\w+)'", fields)
            print(f"  seed {seed:>3} {form.group(1) if form else '?'} {arch.group(1) if arch else '?'} "
                  f"{dtype.group(1) if dtype else '?'}: {misses}")


if __name__ == "__main__":
    main()
