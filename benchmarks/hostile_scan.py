"""Exploratory scan for superlinear inputs: every slot x every character run, and every
structural case, at two sizes; prints the time and memory ratios, worst first.

    python3 benchmarks/hostile_scan.py [--small 20000] [--factor 8] [--only SLOT|KIND ...]

The suite's `tests/untrusted/test_hostile_input.py` runs a fixed sample of the same cases."""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.hostile import (  # noqa: E402
    CHARS, SLOTS, STRUCTURAL, measure, measure_here, slot_case, structural_case)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=20_000)
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--here", action="store_true", help="measure in this process (tracemalloc), not a fresh one")
    args = ap.parse_args()
    cases = [(f"{s}:{c!r}", lambda n, s=s, c=c: slot_case(s, c, n)) for s in SLOTS for c in CHARS]
    cases += [(k, lambda n, k=k: structural_case(k, n)) for k in STRUCTURAL]
    if args.only:
        cases = [c for c in cases if c[0].split(":")[0] in args.only]
    rows = []
    for name, make in cases:
        small, big = make(args.small), make(args.small * args.factor)
        t1, m1, o1 = measure_here(small, 1) if args.here else measure(small, 1, args.timeout)
        t2, m2, o2 = measure_here(big, 1) if args.here else measure(big, 1, args.timeout)
        ratio = t2 / max(t1, 0.01)
        slope = (m2 - m1) / (len(big) - len(small))
        rows.append((ratio, name, t1, t2, slope, o2))
        print(f"{name:24} {t1:7.3f}s {t2:7.3f}s x{ratio:6.1f}  mem {m2 / len(big):6.1f} B/char "
              f"(growth {slope:6.1f})  {o2}", flush=True)
    print("\nworst time ratios:")
    for r in sorted(rows, reverse=True)[:15]:
        print(f"{r[1]:24} x{r[0]:6.1f}  {r[3]:7.3f}s  growth {r[4]:6.1f} B/char  {r[5]}")
    print("\nworst memory growth:")
    for r in sorted(rows, key=lambda r: -r[4])[:15]:
        print(f"{r[1]:24} x{r[0]:6.1f}  {r[3]:7.3f}s  growth {r[4]:6.1f} B/char  {r[5]}")


if __name__ == "__main__":
    main()
