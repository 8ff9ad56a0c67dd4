"""The hostile inputs of issue 12's table, each run through `hloflops FILE` in a fresh process:
CPU seconds, peak RSS and exit code. `--root` runs another checkout's code on the same inputs
(how the before/after numbers in the issue's report were taken).

    python3 benchmarks/hostile_rows.py [--root PATH] [--timeout 60] [--scale 1.0]"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

HEAD = "HloModule m\n\nENTRY e {\n"
LOOP = ('HloModule m\n\nbody {\n  p = s32[] parameter(0)\n  one = s32[] constant(1)\n'
        '  ROOT a = s32[] add(p, one)\n}\n\ncond {\n  p = s32[] parameter(0)\n  ROOT t = pred[] constant(true)\n}\n\n'
        'ENTRY e {\n  z = s32[] constant(0)\n'
        '  ROOT w = s32[] while(z), condition=cond, body=body, backend_config={"known_trip_count":{"n":"TRIPS"}}\n}\n')


def calls(n: int) -> str:
    parts = ["HloModule m\n\nc0 {\n  ROOT p = f32[] parameter(0)\n}\n"]
    level = "c{i} {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c{j}\n}}\n"
    parts += [level.format(i=i, j=i - 1) for i in range(1, n)]
    parts.append(f"ENTRY e {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c{n - 1}\n}}\n")
    return "\n".join(parts)


def rows(scale: float) -> list[tuple[str, str]]:
    n = lambda k: max(1, int(k * scale))  # noqa: E731
    big = 2**63 - 1
    return [
        (f"op_name of {n(5_000_000):,} chars", HEAD + '  ROOT c = f32[] constant(1), metadata={op_name="'
         + "a" * n(5_000_000) + '"}\n}\n'),
        (f"unterminated string over {n(100_000):,} lines", HEAD + '  ROOT c = f32[] constant(1), metadata={op_name="x\n'
         + "a\n" * n(100_000) + "}\n"),
        (f"operand + {n(50_000):,} spaces", HEAD + "  p = f32[] parameter(0)\n  ROOT n = f32[] negate(x"
         + " " * n(50_000) + "!)\n}\n"),
        (f"x#1 x {n(20_000):,}", HEAD + "  p = (f32[]) parameter(0)\n  ROOT n = f32[] negate(f32[] p" + "#1" * n(20_000)
         + ")\n}\n"),
        (f'{n(50_000):,} \\" in an open op_name', HEAD + '  ROOT c = f32[] constant(1), metadata={op_name="'
         + '\\"' * n(50_000) + "\n}\n"),
        ("known_trip_count -1,000,000", LOOP.replace("TRIPS", "-1000000")),
        ("known_trip_count of 4,000 digits", LOOP.replace("TRIPS", "9" * 4000)),
        (f"{n(600):,} nested calls", calls(n(600))),
        ("f32[int64 max, int64 max]",
         HEAD + f"  p = f32[{big},{big}] parameter(0)\n  ROOT n = f32[{big},{big}] negate(p)\n}}\n"),
        (f"{n(100_000):,} dims", HEAD + "  p = f32[" + ",".join(["2"] * n(100_000)) + "] parameter(0)\n  ROOT n = f32["
         + ",".join(["2"] * n(100_000)) + "] negate(p)\n}\n"),
        ("f32[99999999999999999999]", HEAD + "  ROOT p = f32[99999999999999999999] parameter(0)\n}\n"),
    ]


# The CLI in this process, then its own peak RSS (KB) as the last line of stderr.
_CHILD = """
import resource, sys
from hloflops.cli import main
try:
    code = main([sys.argv[1]])
finally:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in rows(args.scale):
            path = os.path.join(tmp, "m.hlo")
            with open(path, "w") as f:
                f.write(text)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            try:
                proc = subprocess.run([sys.executable, "-c", _CHILD, path], cwd=args.root, capture_output=True,
                                      text=True, timeout=args.timeout, env={**os.environ, "PYTHONPATH": args.root})
                *lines, rss = proc.stderr.strip().splitlines() or ["", "0"]
                code, last = proc.returncode, (lines or [""])[-1][:90]
                rss_mb = int(rss) / 1024 if rss.isdigit() else float("nan")
            except subprocess.TimeoutExpired:
                code, last, rss_mb = "timeout", f"not finished after {args.timeout:g} s", float("nan")
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            print(f"{name:38} cpu {cpu:7.2f} s  wall {time.monotonic() - start:7.2f} s  "
                  f"rss {rss_mb:7.0f} MB  exit {code}  {last}", flush=True)


if __name__ == "__main__":
    main()
