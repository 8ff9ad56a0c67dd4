"""analyze() against XLA's own parse + HloCostAnalysis of the same text, and its peak memory.

    python3 benchmarks/analyze_speed.py                 # the 5 largest corpus modules + a generated one
    python3 benchmarks/analyze_speed.py --layers 320    # the generated transformer train step (~29 MB)

Time: CPU seconds (both sides are single-threaded; on a shared machine wall time mostly measures
the neighbours), in one process, `analyze(text)` and XLA's `hlo_module_from_text` +
`hlo_module_cost_analysis` alternating run by run, the median of --repeat runs each. `analyze`
includes our parse, as a user calls it. Each side's result (our Report, XLA's module) is freed
after its clock stops (a mixtral Report takes ~5 ms to free).

Each module is timed in a fresh process of its own (both sides in it), so that no module's time
depends on which modules the list put before it. In one process for all of them, `analyze`
slowed down by 10-20% on a module that came after others (gemma4: 0.26 s first, 0.29-0.36 s after
mixtral, gemma2 and torax), with the same instruction count under callgrind (2.240 G vs 2.244 G):
the heap that XLA's and our earlier runs leave behind, not more work. XLA's own time did not move.

Memory: peak RSS of a fresh process that imports the same modules, reads the text and then runs
either `hloparse.parse(text)` alone or `analyze(text)`; the ratio of the two peaks is the one
the target is about. The growth over the process's baseline (imports + text) is shown too.

The table is written to benchmarks/results/analyze_speed.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from parse_speed import generated_module, largest_corpus_modules  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "analyze_speed.md"
TARGET_TIME, TARGET_MEMORY = 2.5, 1.5

# Peak RSS from /proc/self/status (VmHWM): unlike getrusage's ru_maxrss, it starts afresh at
# exec, so the parent's memory (jax, XLA's module) does not count.
_CHILD = r"""
import json, sys
def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
sys.path.insert(0, sys.argv[3])
import hloparse
from hloflops import analyze
import hloflops.accounting, hloflops.engine, hloflops.report.report  # noqa: F401  (same imports both ways)
text = open(sys.argv[2]).read()
base = peak_kb()
result = hloparse.parse(text) if sys.argv[1] == "parse" else analyze(text)
print(json.dumps({"peak_kb": peak_kb(), "base_kb": base}))
"""


def xla_parse_and_cost(text: str) -> float:
    from hloflops.xla.compare import _cpu_client
    from jax._src.lib import xla_client
    from jaxlib import _hlo

    client = _cpu_client()
    start = time.process_time()
    module = _hlo.hlo_module_from_text(text)
    xla_client._xla.hlo_module_cost_analysis(client, module)
    return time.process_time() - start


def ours(text: str) -> float:
    from hloflops import analyze

    start = time.process_time()
    report = analyze(text)  # freed after the clock stops, as XLA's module is on the other side
    elapsed = time.process_time() - start
    del report
    return elapsed


def peak_memory(which: str, path: Path) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD, which, str(path), str(ROOT)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def timed_in_fresh_process(path: Path, repeat: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--time-one", str(path), "--repeat", str(repeat)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"timing {path.name} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def times(path: Path, repeat: int) -> dict[str, float]:
    """The median CPU seconds of each side, in this process."""
    text = path.read_text()
    xla_parse_and_cost(text)  # warm up both (imports, XLA's client) outside the timing
    ours(text)
    xla_times, our_times = [], []
    for _ in range(repeat):
        xla_times.append(xla_parse_and_cost(text))
        our_times.append(ours(text))
    return {"ours": statistics.median(our_times), "xla": statistics.median(xla_times)}


def measure(path: Path, repeat: int) -> dict[str, float]:
    timed = timed_in_fresh_process(path, repeat)
    parse_mem, analyze_mem = peak_memory("parse", path), peak_memory("analyze", path)
    return {
        "mb": path.stat().st_size / 1e6,
        "ours": timed["ours"],
        "xla": timed["xla"],
        "parse_peak_mb": parse_mem["peak_kb"] / 1024,
        "analyze_peak_mb": analyze_mem["peak_kb"] / 1024,
        "parse_growth_mb": (parse_mem["peak_kb"] - parse_mem["base_kb"]) / 1024,
        "analyze_growth_mb": (analyze_mem["peak_kb"] - analyze_mem["base_kb"]) / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=320)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--corpus-modules", type=int, default=5)
    ap.add_argument("--time-one", type=Path, help=argparse.SUPPRESS)  # the child of timed_in_fresh_process
    args = ap.parse_args()
    if args.time_one is not None:
        print(json.dumps(times(args.time_one, args.repeat)))
        return
    paths = largest_corpus_modules(args.corpus_modules) + [generated_module(args.layers)]
    lines = [
        f"CPU seconds, median of {args.repeat}, alternating in one fresh process per module; peak RSS of a "
        "fresh process "
        "(imports + text + the work). Target: time ratio <= 2.5, memory ratio <= 1.5.",
        "",
        "| module | MB | analyze s | XLA parse+cost s | time ratio | parse peak MB | analyze peak MB | memory ratio "
        "| growth MB parse / analyze |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for path in paths:
        r = measure(path, args.repeat)
        name = path.name if len(path.name) <= 60 else path.name[:28] + "..." + path.name[-29:]
        line = (f"| {name} | {r['mb']:.1f} | {r['ours']:.2f} | {r['xla']:.2f} | {r['ours'] / r['xla']:.2f} "
                f"| {r['parse_peak_mb']:.0f} | {r['analyze_peak_mb']:.0f} "
                f"| {r['analyze_peak_mb'] / r['parse_peak_mb']:.2f} "
                f"| {r['parse_growth_mb']:.0f} / {r['analyze_growth_mb']:.0f} |")
        print(line, flush=True)
        lines.append(line)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
