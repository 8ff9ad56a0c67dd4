"""Peak memory of a local batch worker over many modules, retiring or not (hloflops.batch.pool's
RETIRE_AFTER_BYTES): the engine's objects hold reference cycles that escape the collector, so a
worker that never retires keeps every module it analysed.

    python3 benchmarks/batch_memory.py [--corpus DIR] [--times N]

Sends the corpus's modules over 1 MB (index.csv; default ../shared/corpus), N times over (default 2),
to one local worker, once with retiring off and once at the default, and prints each run's files,
workers, peak worker RSS and the workers' CPU seconds. The result of 2026-12-03 is in
benchmarks/results/batch_speed_2026-12-03_third.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "analysis"), str(ROOT)]

from hloflops.batch.pool import RETIRE_AFTER_BYTES, Job, run_local  # noqa: E402
from hloflops.batch.worker import WorkerOptions, analyze_file  # noqa: E402


def _analyse_and_measure(path: str, data: bytes, options: WorkerOptions) -> dict:
    record = analyze_file(path, data, options)
    return {"status": record["status"], "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "pid": os.getpid()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--times", type=int, default=2)
    args = ap.parse_args()
    with open(args.corpus / "index.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["xla_parses"] == "yes" and int(r["bytes"]) > 1_000_000]
    paths = [args.corpus / r["file"] for r in sorted(rows, key=lambda r: -int(r["bytes"]))] * args.times
    import hloflops.api  # noqa: F401  (as run_batch does: forked workers start with the engine loaded)
    import hloparse  # noqa: F401

    print(f"load average at the start: {os.getloadavg()}")
    for retire_after in (None, RETIRE_AFTER_BYTES):
        records: list[dict] = []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        run_local((Job(str(p), p.read_bytes()) for p in paths), fn=_analyse_and_measure, options=WorkerOptions(),
                  processes=1, retire_after=retire_after, start_method="fork",
                  on_done=lambda job, record: records.append(record))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        print(f"retire_after={retire_after}: {len(records)} files, {sum(p.stat().st_size for p in paths) / 2**20:.0f} "
              f"MiB, ok {sum(r['status'] == 'ok' for r in records)}, workers {len({r['pid'] for r in records})}, "
              f"peak worker RSS {max(r['peak_mb'] for r in records):.0f} MB, workers' CPU {cpu:.1f} s, "
              f"wall {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
