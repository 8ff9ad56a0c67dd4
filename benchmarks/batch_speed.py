"""How fast `hloflops batch` goes over a directory of HLO modules: files/s and MB/s with 1 and 2
local processes (`--processes 1 2 4 ...`) and on a dask LocalCluster of as many single-threaded workers
as the most processes (needs `dask[distributed]`; `--no-dask` skips it), and how long a rerun takes
when every file is cached. CPU seconds of every configuration, dask's workers included (asked of each
worker process), give the per-core rate (MB per CPU second) that carries over to other machines.
Appends a Markdown table to --out (default: benchmarks/results/batch_speed.md).

    python3 benchmarks/batch_speed.py [--corpus DIR | --over-1mb] [--limit N] [--no-dask] [--out FILE]

`--over-1mb`: the corpus's modules over 1 MB that XLA parses (issue 32's set), through a temporary
directory of links.

--corpus defaults to the repo's examples/ (a few small modules: it shows the script works, not the
speed); the runs recorded in benchmarks/results/batch_speed.md are over the 4,380-module corpus
that sits beside the repo in the development setup (--corpus ../shared/corpus).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The engine to measure: a snapshot of the working tree's (see _run_on_snapshot), else the tree's own.
ENGINE = Path(os.environ.get("HLOFLOPS_BENCH_ENGINE", str(REPO)))
sys.path.insert(0, str(ENGINE))
if (ENGINE / "analysis" / "hloflops").is_dir():  # the working tree: hloflops lives under analysis/
    sys.path.insert(0, str(ENGINE / "analysis"))

from hloflops.batch.run import run_batch  # noqa: E402
from hloflops.batch.discovery import discover  # noqa: E402
from hloflops.batch.worker import engine_version  # noqa: E402

MB = 1024 * 1024
HEADER = """# Batch analysis speed

Each section is one run of `benchmarks/batch_speed.py` (newest last). The engine is measured on a
snapshot of its sources, so its version (and the cache) stays put during a run.

`CPU s`: CPU time of the batch process and its worker processes (dask's workers: asked of each
worker process before and after; runs before 2026-12-03 19:00 did not measure them). `parent CPU s`
(from 2026-12-03 19:00): the batch process's own (discovery, reading and hashing the files, the
database; with dask also the client and the LocalCluster's scheduler): the part that does not spread
over the workers. `load`: the 1-minute load average around the run. These machines
are shared with other work: when the load exceeds the CPU count, wall-clock rates understate what
an idle machine does, while CPU seconds per MB hardly depend on the load.

`failed` counts parse errors (including the 26 deliberately malformed modules), engine errors,
timeouts and crashes; each has its row and message in the database. The cached rerun reads and
hashes every file and finds its row unchanged; nothing is analysed.
"""


def _cpu_seconds() -> float:
    """CPU time of this process and its reaped children (the local workers; not dask's)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _process_cpu() -> float:
    """CPU seconds of the calling process (run on each dask worker)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(label: str, paths: list[str], db: Path, client=None, **options) -> dict:
    load_before = os.getloadavg()[0]
    cpu_before = _cpu_seconds()
    parent_before = _process_cpu()
    workers_before = client.run(_process_cpu) if client is not None else {}
    start = time.perf_counter()
    summary = run_batch(paths, db=db, progress=False, **options)
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_before
    parent = _process_cpu() - parent_before
    if client is not None:  # the dask workers' CPU, and this process's (the client, the database)
        workers_after = client.run(_process_cpu)
        cpu += sum(workers_after[w] - workers_before.get(w, 0.0) for w in workers_after)
    row = {
        "label": label,
        "files": summary.files,
        "analyzed": summary.analyzed,
        "cached": summary.cached,
        "mb": summary.total_bytes / MB,
        "seconds": seconds,
        "ok": summary.status_counts.get("ok", 0),
        "failed": summary.failed,
        "cpu": cpu,
        "parent": parent,
        "load": (load_before + os.getloadavg()[0]) / 2,
    }
    print(
        f"{label}: {row['files']} files, {row['mb']:.1f} MB in {seconds:.1f} s "
        f"({row['files'] / seconds:.1f} files/s, {row['mb'] / seconds:.2f} MB/s); "
        f"{row['ok']} ok, {row['failed']} failed, {row['cached']} cached",
        file=sys.stderr,
    )
    return row


def _import_engine() -> None:
    """Run on each dask worker before the timed run: what its first file would import."""
    import hloflops.api  # noqa: F401
    import hloflops.batch.worker  # noqa: F401


def _run_on_snapshot(argv: list[str]) -> int:
    """Rerun this script on a private copy of the engine's sources: the cached-rerun measurement
    needs the engine version to stay put, and a working tree being edited would change it."""
    with tempfile.TemporaryDirectory(prefix="hloflops-bench-engine-") as snapshot:
        for directory, package in (("hloparse", "hloparse"), ("analysis/hloflops", "hloflops")):
            shutil.copytree(REPO / directory, Path(snapshot) / package, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", Path(snapshot) / "pyproject.toml")  # the version is part of the engine's
        # The child runs in the snapshot; relative paths on the command line are the caller's.
        env = dict(os.environ, HLOFLOPS_BENCH_ENGINE=snapshot, PYTHONPATH=snapshot, HLOFLOPS_BENCH_CWD=os.getcwd())
        return subprocess.call([sys.executable, str(Path(__file__).resolve()), *argv], env=env, cwd=snapshot)


def main(argv: list[str] | None = None) -> int:
    if "HLOFLOPS_BENCH_ENGINE" not in os.environ:
        return _run_on_snapshot(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(REPO / "examples"),
                        help="directory of HLO modules (default: the repo's examples/)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N files (by path)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-file limit (s)")
    parser.add_argument("--over-1mb", action="store_true",
                        help="the corpus's modules over 1 MB (issue 32), from --corpus's index.csv "
                             "(default corpus: ../shared/corpus)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2],
                        help="local worker processes of each run (default: 1 2); dask gets the largest")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "batch_speed.md"))
    args = parser.parse_args(argv)
    caller_cwd = Path(os.environ.get("HLOFLOPS_BENCH_CWD", os.getcwd()))
    if args.over_1mb and args.corpus == str(REPO / "examples"):
        args.corpus = str(REPO.parent / "shared" / "corpus")
    args.corpus = str(caller_cwd / args.corpus)  # an absolute path stays as it is
    args.out = str(caller_cwd / args.out)
    if args.over_1mb:
        with tempfile.TemporaryDirectory(prefix="hloflops-batch-over-1mb-") as links:
            for name in _over_1mb(Path(args.corpus)):
                os.symlink(Path(args.corpus) / name, Path(links) / name.replace("/", "__"))
            described = f"a directory of links to the {len(os.listdir(links))} modules of `{args.corpus}` over 1 MB"
            return _run(args, links, described)
    return _run(args, args.corpus, f"`{os.path.relpath(args.corpus, REPO)}`")


def _over_1mb(corpus: Path) -> list[str]:
    """The corpus's modules over 1 MB that XLA parses (index.csv), as paths under it."""
    with open(corpus / "index.csv", newline="") as f:
        return [r["file"] for r in csv.DictReader(f) if r["xla_parses"] == "yes" and int(r["bytes"]) > 1_000_000]


def _run(args: argparse.Namespace, corpus: str, described: str) -> int:
    args.corpus = corpus

    if not Path(args.corpus).is_dir():
        print(f"batch_speed: --corpus {args.corpus}: not a directory", file=sys.stderr)
        return 2
    files = [str(f.path) for f in discover([args.corpus]).files]
    if not files:
        print(f"batch_speed: no HLO modules under {args.corpus} (give --corpus DIR)", file=sys.stderr)
        return 2
    if args.limit:
        files = files[: args.limit]
    results = []
    load_start = os.getloadavg()
    most = max(args.processes)
    with tempfile.TemporaryDirectory(prefix="hloflops-batch-bench-") as tmp:
        tmp_path = Path(tmp)
        for n in args.processes:
            results.append(_measure(f"local, {n} process{'es' if n > 1 else ''}", files, tmp_path / f"p{n}.sqlite",
                                    processes=n, timeout_s=args.timeout))
        # Right after the run it repeats, so that edits to the engine's sources in between (which
        # rightly invalidate the cache) are unlikely; the table's `cached` column says if all were.
        results.append(_measure(f"cached rerun (local, {most} processes)", files, tmp_path / f"p{most}.sqlite",
                                processes=most, timeout_s=args.timeout))
        if not args.no_dask:
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=most, threads_per_worker=1, processes=True, dashboard_address=None,
                              silence_logs=40) as cluster, Client(cluster) as client:
                # The workers import the engine with their first file; a warm-up file first, so that the
                # table compares analysis with analysis (a long-lived cluster pays the import once).
                client.run(_import_engine)
                results.append(_measure(f"dask LocalCluster, {most} workers x 1 thread", files,
                                        tmp_path / "dask.sqlite", client=client, scheduler=client,
                                        timeout_s=args.timeout))
    load_end = os.getloadavg()

    run = [
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"`python3 benchmarks/batch_speed.py{' ' + ' '.join(sys.argv[1:]) if sys.argv[1:] else ''}` over "
        f"{described} ({len(files)} module files), engine {engine_version()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()}); load average "
        f"(1, 5, 15 min) at the start {', '.join(f'{x:.1f}' for x in load_start)}, at the end "
        f"{', '.join(f'{x:.1f}' for x in load_end)}.",
        "",
        "| configuration | files | MB | seconds | files/s | MB/s | CPU s | MB per CPU s | parent CPU s | load | ok "
        "| failed | cached |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        per_cpu = "-" if r["cpu"] < 0.05 else f"{r['mb'] / r['cpu']:.2f}"
        run.append(
            f"| {r['label']} | {r['files']} | {r['mb']:.1f} | {r['seconds']:.1f} | {r['files'] / r['seconds']:.1f} "
            f"| {r['mb'] / r['seconds']:.2f} | {r['cpu']:.1f} | {per_cpu} | {r['parent']:.2f} "
            f"| {r['load']:.1f} | {r['ok']} | {r['failed']} | {r['cached']} |"
        )
    run.append("")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Each run is appended: on a shared machine one run says little, several show the spread.
    previous = out.read_text() if out.exists() else HEADER
    out.write_text(previous.rstrip("\n") + "\n\n" + "\n".join(run))
    print("\n".join(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
