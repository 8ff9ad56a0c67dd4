"""How fast `hloflops FILE` starts and answers, and what it imports.

    python3 benchmarks/startup_time.py [FILE ...] [--runs N]

For each file (default: every bundled `examples/*.after_optimizations.hlo`) it runs the real
command line in a fresh interpreter N times (`python -m hloflops.cli FILE --json`) and prints the
median and best wall time and the median CPU time (user + system; a busy machine inflates it
least), the time of each phase in one process (imports, parse, account, JSON), then runs it once
under `python -X importtime` and lists the heavy modules imported (jax, jaxlib and pandas must
not be; networkx and numpy are imported where a walk or a float loop counter needs them, not by a small module)
and the slowest imports. Also prints
the bare interpreter's start-up for reference.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("jax", "jaxlib", "pandas", "networkx", "numpy", "scipy")

# Where the time goes inside one fresh process: imports, parsing, accounting, the JSON.
PHASES = r"""
import sys, time
t0 = time.perf_counter()
import hloparse
from hloflops.accounting import account
from hloflops.report.report import Report
from hloflops.api import num_devices
t1 = time.perf_counter()
module = hloparse.load(sys.argv[1])
t2 = time.perf_counter()
report = Report(account(module), path=module.path, num_devices=num_devices(module))
t3 = time.perf_counter()
report.to_json()
t4 = time.perf_counter()
print(f"{(t1 - t0) * 1000:.0f} {(t2 - t1) * 1000:.0f} {(t3 - t2) * 1000:.0f} {(t4 - t3) * 1000:.0f}")
"""


def wall_times(cmd: list[str], runs: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds per run; `cpu` collects user+system CPU seconds per run (what a busy
    machine inflates least)."""
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return times


def imported_modules(cmd_args: list[str]) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) for every top-level import, from -X importtime."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd_args], cwd=ROOT, check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:"):].split("|")
        try:
            cumulative = int(parts[1].strip())
        except ValueError:
            continue  # the header line
        out.append((cumulative, parts[2].rstrip()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    files = args.files or sorted(glob.glob(os.path.join(ROOT, "examples", "*.after_optimizations.hlo")))
    bare = wall_times([sys.executable, "-c", "pass"], args.runs)
    print(f"bare python start-up: median {statistics.median(bare) * 1000:.0f} ms")
    print(f"{'file':<50} {'size':>9} {'median':>9} {'best':>9} {'cpu':>9}")
    for path in files:
        cmd = [sys.executable, "-m", "hloflops.cli", path, "--json"]
        cpu: list[float] = []
        times = wall_times(cmd, args.runs, cpu)
        size = os.path.getsize(path)
        print(f"{os.path.relpath(path, ROOT):<50} {size:>9,} {statistics.median(times) * 1000:>7.0f}ms "
              f"{min(times) * 1000:>7.0f}ms {statistics.median(cpu) * 1000:>7.0f}ms")
    print(f"\n{'file':<50} {'imports':>8} {'parse':>8} {'account':>8} {'json':>8}   (ms, one fresh process)")
    for path in files:
        out = subprocess.run([sys.executable, "-c", PHASES, path], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.split()
        print(f"{os.path.relpath(path, ROOT):<50} " + " ".join(f"{v:>8}" for v in out))
    probe = files[0]
    modules = imported_modules(["-m", "hloflops.cli", probe, "--json"])
    names = [name.strip() for _, name in modules]
    heavy = sorted({n.split(".")[0] for n in names if n.split(".")[0] in HEAVY})
    print(f"\nimports for {os.path.relpath(probe, ROOT)}: {len(names)} modules; heavy ones: {heavy or 'none'}")
    top = sorted((m for m in modules if not m[1].startswith("  ")), reverse=True)[:8]
    for micros, name in top:
        print(f"  {micros / 1000:8.1f} ms  {name.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
