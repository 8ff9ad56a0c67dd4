"""How `hloflops FILE`'s time and memory grow with the module's size, up to ~300 MB, next to XLA's.

    python3 benchmarks/scale_speed.py                    # 1, 2, 5 and 10 copies of the ~29 MB step
    python3 benchmarks/scale_speed.py --copies 1 3 --layers 64

The modules are built from the generated transformer train step (benchmarks/parse_speed.py,
`--layers`, ~29 MB at 320): k copies of its computations, each copy's names suffixed `_kN`, and a
new ENTRY that calls every copy's entry computation on the same parameters and returns their
results as one tuple (`call` is costed by both sides like any other callee: the totals are k times
the step's). A copy of XLA's output is still text XLA wrote, so nothing new is tested for
correctness here; it is the size that grows.

For each size, one round (or --repeat): a fresh process of `hloflops FILE` (wall and CPU seconds,
peak RSS) and a fresh process of jaxlib's `hlo_module_from_text` + `hlo_module_cost_analysis`
(the same clocks from after jax's import; its peak RSS includes jax). Written to
benchmarks/results/scale_speed_<date>.md (or --out). The modules are cached beside the
generated step (~/.cache/hloflops-bench).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from cli_speed import RATIO, STARTUP_S, _XLA, hloflops, peak_mb, timed  # noqa: E402
from parse_speed import generated_module  # noqa: E402

_HEADER = re.compile(r"^(ENTRY )?%([\w.\-]+) (\(.*\)) -> (.*) \{$", re.M)
_NAME = re.compile(r"%([\w.\-]+)")
_PARAMETER = re.compile(r"^  (%[\w.\-]+) = (.*) parameter\((\d+)\)", re.M)


def copies_module(step: Path, copies: int) -> Path:
    """`copies` copies of `step` under one new ENTRY (see the module docstring); cached."""
    path = step.with_name(f"{step.stem}_x{copies}.hlo")
    if path.exists():
        return path
    text = step.read_text()
    body = text[text.index("\n") + 1:]  # the computations, without the HloModule line
    first = _HEADER.search(body)
    assert first is not None, f"{step}: no computation"
    tables, body = body[:first.start()], body[first.start():]  # the stack-frame tables (FileNames, ...): once
    names = {m.group(2) for m in _HEADER.finditer(body)}
    entry = next(m for m in _HEADER.finditer(body) if m.group(1))
    entry_name, signature, result = entry.group(2), entry.group(3), entry.group(4)
    entry_body = body[entry.end():body.index("\n}", entry.end())]
    params = sorted(_PARAMETER.findall(entry_body), key=lambda p: int(p[2]))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as out:
        out.write(f"HloModule {step.stem}_x{copies}\n{tables}")
        for k in range(copies):
            renamed = _NAME.sub(lambda m, k=k: f"%{m.group(1)}_k{k}" if m.group(1) in names else m.group(0), body)
            out.write(re.sub(r"^ENTRY ", "", renamed, flags=re.M))  # the new ENTRY calls each copy's
            out.write("\n")
        operands = ", ".join(name for name, _shape, _index in params)
        results = ", ".join([result] * copies)
        out.write(f"ENTRY %main_x{copies} {signature} -> ({results}) {{\n")
        for name, shape, index in params:
            out.write(f"  {name} = {shape} parameter({index})\n")
        for k in range(copies):
            out.write(f"  %call_k{k} = {result} call({operands}), to_apply=%{entry_name}_k{k}\n")
        out.write(f"  ROOT %results = ({results}) tuple({', '.join(f'%call_k{k}' for k in range(copies))})\n}}\n")
    os.replace(tmp, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, nargs="*", default=[1, 2, 5, 10])
    ap.add_argument("--layers", type=int, default=320)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or ROOT / "benchmarks" / "results" / f"scale_speed_{datetime.date.today()}.md"
    step = generated_module(args.layers)
    load = os.getloadavg()
    lines = ["# scale_speed", "",
             f"`python3 benchmarks/scale_speed.py --copies {' '.join(map(str, args.copies))} --repeat {args.repeat}`: "
             f"k copies of the {args.layers}-layer train step under one ENTRY; `hloflops FILE` (whole process) against "
             "XLA's parse + cost analysis (after jax's import), median of the rounds. "
             f"{os.cpu_count()} CPUs, load average at the start {load[0]:.1f}."
             + (f" {args.note}" if args.note else ""),
             "", "| copies | MB | hloflops wall s | XLA wall s | hloflops CPU s | XLA CPU s | CPU ratio | "
             "meets 1.5x + 0.25 s (CPU) | hloflops peak MB | XLA peak MB | hloflops CPU s per MB |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for k in args.copies:
        path = copies_module(step, k)
        mb = path.stat().st_size / 1e6
        ours, xla = [], []
        for _ in range(args.repeat):
            xla_out = json.loads(timed([sys.executable, "-c", _XLA, str(path)])[2].strip().splitlines()[-1])
            xla.append((xla_out["seconds"], xla_out["cpu"]))
            ours.append(timed(hloflops(str(path)))[:2])
        wall, cpu = statistics.median(w for w, _ in ours), statistics.median(c for _, c in ours)
        xwall, xcpu = statistics.median(w for w, _ in xla), statistics.median(c for _, c in xla)
        our_peak = peak_mb(hloflops(str(path)))
        xla_peak = peak_mb([sys.executable, "-c", _XLA, str(path)])
        line = (f"| {k} | {mb:.1f} | {wall:.1f} | {xwall:.1f} | {cpu:.1f} | {xcpu:.1f} | {cpu / xcpu:.2f} | "
                f"{'yes' if cpu <= RATIO * xcpu + STARTUP_S else 'NO'} | {our_peak:.0f} | {xla_peak:.0f} | "
                f"{cpu / mb:.3f} |")
        print(line, flush=True)
        lines.append(line)
    load = os.getloadavg()
    lines += ["", f"Load average at the end: {load[0]:.1f}."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
