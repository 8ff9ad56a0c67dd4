"""The long sweep of the remat differential test (issue 28): draws programs from
tests/remat/generator.py, compiles each with and without its remat wrapper, and judges hloflops'
remat FLOPs against the difference, at both stages. Prints the pass rate per form: the dot and
convolution FLOPs exact (`matmul`), every opcode exact but for loop counters (`all`), and the
report honest (`bounds`: exact, or the truth's total inside the `remat_flops_bounds` it prints).

    python3 benchmarks/remat_sweep.py --first 0 --count 200 [--family base|more|tpu] [--out FILE] [--jsonl FILE]
        [--cache DIR]

`--family more` draws the forms added in the third round (nnx.scan over nnx.vmap layers, hk.remat,
a conv net, the offload policies, the Flax examples' sizes); `--family tpu` compiles draws of
either family for a v5e through libtpu (one device or sharded; libtpu needed). Rows are
`generator.label`: the form, with the architecture, offload policy and TPU mesh where they are
new. `--out` writes the table and the failing draws to FILE. Each failing draw is printed with
the line that replays it. `--jsonl` writes a line per draw and stage, to compare two runs seed by seed
(`benchmarks/remat_compare.py OLD.jsonl NEW.jsonl`).
`--cache DIR` keeps each draw's compiled texts in DIR and reads them back on the next run
(tests/remat/text_cache.py): compiling is most of a sweep and does not depend on the analysis, so
a rerun after a change to a rule takes a fraction of the time (base 150 draws: about 70 s
compiling, about 30 s from the cache). The time printed is then the analysis and judging only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "analysis"), str(ROOT)]

from tests.remat.generator import check, draw, label  # noqa: E402
from tests.remat.judge import STAGES  # noqa: E402

# matmul: dot and convolution remat FLOPs exact; all: every opcode exact (loop counters aside);
# bounds: every opcode exact, or the truth's total within the reported remat_flops_bounds;
# attainable: no opcode runs less with remat than without (else no split, remat >= 0, can be exact)
KINDS = ("matmul", "all", "bounds", "attainable")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--family", default="base", choices=("base", "more", "tpu"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--jsonl", type=Path, help="also write one JSON line per draw and stage (truth, "
                        "reported, bounds, misses by opcode), to compare two sweeps seed by seed")
    parser.add_argument("--cache", type=Path, help="keep the compiled module texts in this directory and read "
                        "them back on the next run (compiling does not depend on the analysis)")
    args = parser.parse_args()
    records = args.jsonl.open("w") if args.jsonl else None
    tally: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    failures: list[str] = []
    started = time.time()
    for seed in range(args.first, args.first + args.count):
        form = draw(seed, args.family)
        row = label(form) if args.family != "base" else form.form
        try:
            outcome = check(form, args.cache)
        except Exception as error:  # a program that does not build or compile is a failing draw too
            failures.append(f"seed {seed}: {form!r} raised {type(error).__name__}: {error}")
            for stage in STAGES:
                for kind in KINDS:
                    tally[row][f"{kind} {stage}"][1] += 1
            continue
        for stage in STAGES:
            for kind, ok in (("matmul", outcome.matmul_ok(stage)), ("all", outcome.all_ok(stage)),
                             ("bounds", outcome.in_bounds(stage)), ("attainable", outcome.attainable(stage))):
                cell = tally[row][f"{kind} {stage}"]
                cell[0] += ok
                cell[1] += 1
        if records:
            for v in outcome.verdicts:
                records.write(json.dumps({
                    "seed": seed, "family": args.family, "row": row, "stage": v.stage, "ok": v.ok,
                    "in_bounds": v.in_bounds, "truth": sum(v.truth.values()),
                    "reported": sum(v.reported.values()), "bounds": v.bounds, "misses": v.misses,
                    "attainable": v.attainable, "truth_by_opcode": v.truth}) + "\n")
            records.flush()
        if not all(outcome.all_ok(s) for s in STAGES):
            failures.append(f"seed {seed}: " + outcome.describe())
        print(f"seed {seed} {row} {'ok' if all(outcome.all_ok(s) for s in STAGES) else 'FAIL'} "
              f"({time.time() - started:.0f}s)", flush=True)
    columns = [f"{kind} {stage}" for kind in KINDS for stage in STAGES]
    seeds = f"seeds {args.first}..{args.first + args.count - 1}"
    lines = [f"remat sweep ({args.family}): {seeds}, {time.time() - started:.0f} s", "",
             "| form | draws | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    totals = defaultdict(lambda: [0, 0])
    for form in sorted(tally):
        cells = tally[form]
        draws = cells[columns[0]][1]
        lines.append(f"| {form} | {draws} | " + " | ".join(f"{cells[c][0]}/{cells[c][1]}" for c in columns) + " |")
        for c in columns:
            totals[c][0] += cells[c][0]
            totals[c][1] += cells[c][1]
    lines.append(f"| all | {totals[columns[0]][1]} | " + " | ".join(f"{totals[c][0]}/{totals[c][1]}" for c in columns)
                 + " |")
    lines += ["", "failing draws:", ""] + [f"    {line}" for f in failures for line in f.splitlines()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
