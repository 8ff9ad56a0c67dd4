"""Batch analysis: every HLO module under some directories (XLA dump dirs included), in parallel,
into a SQLite database, with a closing summary. `hloflops DIR ...` / `hloflops batch ...`.

    summary = run_batch(["/tmp/dump"], db="runs.sqlite")
    summary.exit_code   # 0: every file analysed; 1: some failed (each failure has its row)

The parent process discovers the files, reads and hashes each one, skips those whose row already
has the same content hash and engine version, hands the rest to workers (`hloflops.batch.pool`)
and writes each record to the database as it arrives (`hloflops.batch.db`, one commit per file),
so a killed run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from hloflops.batch.cache_dir import CACHE_DIR_ENV, DEFAULT_DB_NAME, default_db_path
from hloflops.batch.db import OK, READ_ERROR, ResultsDB, check_database, export, export_format_for, row_from_result
from hloflops.batch.discovery import AFTER_OPTIMIZATIONS, Discovery, ModuleFile, discover
from hloflops.batch.programs import dump_fingerprint
from hloflops.batch.pool import Job, default_processes, run_dask, run_local
from hloflops.batch.worker import (PROGRAM_SEPARATOR, WorkerFn, WorkerOptions, analyze_file, content_hash,
                                   engine_version, package_version)
from hloflops.batch.progress import Progress
from hloflops.batch.summary import SORT_KEYS, BatchSummary, format_summary, module_matches  # noqa: F401
from hloflops.report.fit import output_width
from hloflops.report.format import escape_controls

DEFAULT_TIMEOUT_S = 600.0
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class NoModulesFound(RuntimeError):
    """The paths hold no HLO module: a usage error (and no database is created)."""


def default_memory_limit(processes: int) -> int:
    """Each local worker's address-space cap: an equal share of the machine's memory, at least
    2 GiB (the engine needs ~30x a module's size at worst; the parent holds little)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30
    return max(2 << 30, total // max(1, processes))


def _size(text: str) -> int:
    """`--memory-limit 4G`, `512M`, `1000000`: bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(text[-1:], 1)
    try:
        value = int(float(text[:-1] if text[-1:] in units else text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 4G or 512M, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _non_negative(kind: type):  # noqa: ANN202
    def parse(text: str):  # noqa: ANN202
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value >= 0:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    return parse


def _read_regular_file(path: Path) -> bytes:
    """The file's bytes; OSError for anything that is not a readable regular file (a FIFO would block)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"not a regular file ({stat.filemode(st.st_mode)})")
    with open(path, "rb") as f:
        return f.read()


def run_batch(
    paths: Iterable[str | os.PathLike[str]],
    *,
    db: str | os.PathLike[str] | None = None,
    processes: int | None = None,
    stage: str = AFTER_OPTIMIZATIONS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    scheduler: Any = None,
    progress: bool = True,
    scopes: bool = False,
    scope_depth: int | None = 3,
    force: bool = False,
    worker_fn: WorkerFn = analyze_file,
    module: str | None = None,
    argv: Sequence[str] | None = None,
    log=None,
    max_inflated: int | None = None,
    memory_limit: int | None = None,
    summary: tuple[int, int | None, bool] | None = None,
    page: bool = False,
    on_result: Callable[[str, dict[str, Any]], None] | None = None,
) -> BatchSummary:
    """Analyse every module file under `paths` into the database `db` (default: the per-user cache's,
    `hloflops.batch.cache_dir`); see the module docstring.

    `processes`: local worker processes (default: every core). `scheduler`: a dask.distributed
    scheduler address (or Client) to use instead. `timeout_s`: per-file limit (None: none).
    `scopes`: also store per-scope sums (`scope_depth` frames of the name stack). `force`:
    re-analyse files even when their row is up to date. `max_inflated`: cap on a gzip file's
    inflated bytes; `memory_limit`: address-space limit of each local worker, bytes (a file that
    needs more gets a `memory` row). `summary`, `page` (WorkerOptions.summary, .page) and `on_result(path,
    record)`, called with each record a worker returns: how `hloflops run` gets the top module's summary and
    page. Raises
    NoModulesFound (before any database is made) when the paths hold no module, DatabaseUnusable
    when `db` is not an hloflops database. `worker_fn`: the per-file function (tests substitute fakes;
    it must be importable by the workers; one may carry an `engine_version` attribute, a callable
    returning the version its rows are cached under).
    """
    log = log or (lambda message: print(escape_controls(f"hloflops batch: {message}"), file=sys.stderr))
    started = time.monotonic()
    paths = list(paths)
    db = default_db_path() if db is None else db
    check_database(db)
    found: Discovery = discover(paths, stage)
    if not found.files and not found.problems:
        skipped = f"; {len(found.skipped)} files skipped, not HLO, e.g. {found.skipped[0][0]}: {found.skipped[0][1]}" \
            if found.skipped else ""
        raise NoModulesFound(f"no HLO modules found under {', '.join(map(os.fspath, paths))} (stage {stage!r}; "
                             f"{found.ignored} other files ignored{skipped})")
    named = [mf for mf in found.files if mf.dump is None or module_matches(mf.dump.module_name, module)]
    filtered = len(found.files) - len(named)
    total_bytes = sum(mf.size for mf in named)
    # Largest first: the long files start early, so the pool does not wait on one at the end.
    order = sorted(named, key=lambda mf: (-mf.size, str(mf.path)))
    if scheduler is None:
        _preload_engine()
    version_of = getattr(worker_fn, "engine_version", None)  # a substitute engine names its own
    if version_of is None:
        # Hashed afresh for every run (not once per process), right after loading the engine that
        # forked workers inherit, so the version names the code that produces this run's rows.
        engine_version.cache_clear()
        version = engine_version()
    else:
        version = str(version_of())
    options = WorkerOptions(scopes=scopes, scope_depth=scope_depth, max_inflated=max_inflated,
                            memory_limit=memory_limit if scheduler is None else None, summary=summary,
                            page=page)
    counts = {"analyzed": 0, "cached": 0}
    bar = Progress(len(order), total_bytes, enabled=progress)
    by_path: dict[str, ModuleFile] = {}

    with ResultsDB(db) as results:
        run_id = results.begin_run(list(argv) if argv is not None else [os.fspath(p) for p in paths], version)

        sizes: dict[str, int] = {}  # as read, which may differ from what discovery saw

        def record(mf: ModuleFile, digest: str | None, result: dict[str, Any]) -> None:
            if result.get("status") == OK and mf.dump is not None:
                before = dump_fingerprint(mf.path, mf.dump.stage)  # the program as jax lowered it
                if before is not None:
                    result = {**result, "program_fingerprint": before}
            row = row_from_result(
                result,
                path=_key(mf),
                content_hash=digest,
                size_bytes=sizes.pop(_key(mf), mf.size),
                stage=mf.stage,
                engine_version=version,
                run_id=run_id,
            )
            results.write(row, result.get("scopes") if scopes else None)
            bar.update(mf.size, failed=row["status"] != OK)

        digests: dict[str, str] = {}

        def jobs() -> Iterator[Job]:
            for mf in order:
                key = _key(mf)
                by_path[key] = mf
                try:
                    data = _read_regular_file(mf.path)
                except OSError as e:
                    counts["analyzed"] += 1  # attempted in this run, like any file sent to a worker
                    reason = e.strerror or str(e)
                    record(mf, None, {"status": READ_ERROR, "error": f"cannot read: {reason}"})
                    continue
                digest = content_hash(data)
                if not force and results.is_cached(key, digest, version):
                    counts["cached"] += 1
                    bar.update(mf.size, cached=True)
                    continue
                digests[key] = digest
                sizes[key] = len(data)
                counts["analyzed"] += 1
                yield Job(key, data)

        def on_done(job: Job, result: dict[str, Any]) -> None:
            if on_result is not None:
                on_result(job.path, result)
            record(by_path[job.path], digests.pop(job.path), result)

        try:
            if scheduler is not None:
                run_dask(jobs(), scheduler=scheduler, fn=worker_fn, options=options, on_done=on_done,
                         timeout_s=timeout_s, log=log)
            else:
                run_local(jobs(), fn=worker_fn, options=options, on_done=on_done,
                          processes=processes or default_processes(), timeout_s=timeout_s)
        finally:
            bar.close()
        rows = tuple(results.module_rows(_key(mf) for mf in order))
        if module is not None:
            def name_of(row: dict[str, Any]) -> str | None:
                dump = by_path[row["path"]].dump if row["path"] in by_path else None
                return row["module_name"] or (dump.module_name if dump else None)

            kept = tuple(r for r in rows if module_matches(name_of(r), module))
            filtered += len(rows) - len(kept)
            rows = kept
        status_counts: dict[str, int] = {}
        for row in rows:
            status_counts[row["status"]] = status_counts.get(row["status"], 0) + 1
        failed = sum(n for status, n in status_counts.items() if status != OK)
        results.end_run(run_id, files=len(order), analyzed=counts["analyzed"], cached=counts["cached"], failed=failed)
    return BatchSummary(
        db_path=os.fspath(db),
        run_id=run_id,
        files=len(order),
        analyzed=counts["analyzed"],
        cached=counts["cached"],
        failed=failed,
        status_counts=status_counts,
        seconds=time.monotonic() - started,
        total_bytes=total_bytes,
        ignored=found.ignored,
        skipped=found.skipped,
        missing_stage=found.missing_stage,
        problems=found.problems,
        rows=rows,
        module_pattern=module,
        filtered=filtered,
    )


def _preload_engine() -> None:
    """Import the engine in the parent, so forked workers start with it loaded (no per-worker import
    time, which matters when timeouts and crashes make us start new ones)."""
    try:
        import hloflops.accounting  # noqa: F401
        import hloflops.api  # noqa: F401
        import hloparse  # noqa: F401
    except Exception:  # every worker will report the import error on its files
        pass


def _key(mf: ModuleFile) -> str:
    # Absolute but not resolved: a symlink keeps its own name (a broken one has no target). A
    # program of a profile (a file of several) is `FILE::NAME`.
    path = os.path.abspath(mf.path)
    return path + PROGRAM_SEPARATOR + mf.program if mf.program else path


# ---- command line ----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hloflops batch",
        description="Analyse every HLO module under the given directories (XLA dump dirs, *.hlo, *.txt, "
        "gzip) into a SQLite database, in parallel, and print the heaviest modules and the worst XLA undercounts.",
        epilog="Exit status: 0 every file analysed, 1 some files failed (each has its row and error), 2 usage.",
    )
    parser.add_argument("paths", nargs="*", help="directories (searched recursively) and files")
    parser.add_argument("--db", default=None,
                        help="SQLite database to write (default: one shared database in the per-user cache "
                             f"directory, e.g. ~/.cache/hloflops/{DEFAULT_DB_NAME}; {CACHE_DIR_ENV} sets the "
                             "directory); the summary says where")
    parser.add_argument("-j", "--processes", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument(
        "--stage",
        default=AFTER_OPTIMIZATIONS,
        help="which dump text per module: after_optimizations (default, any platform prefix), "
        "before_optimizations, all, or an exact stage name / fnmatch pattern",
    )
    parser.add_argument("--timeout", type=_non_negative(float), default=DEFAULT_TIMEOUT_S,
                        help=f"per-file time limit in seconds (default {DEFAULT_TIMEOUT_S:g}; 0: none)")
    parser.add_argument("--scheduler", default=None, help="dask.distributed scheduler address to run on instead")
    parser.add_argument("--scopes", nargs="?", const=3, type=_non_negative(int), default=None, metavar="DEPTH",
                        help="also store per-scope sums, DEPTH frames of the name stack (default 3; 0: whole stack)")
    parser.add_argument("--force", action="store_true", help="re-analyse files even when unchanged")
    parser.add_argument("--export", action="append", default=[], metavar="FILE",
                        help="write the module rows to FILE (.csv, .jsonl, .parquet); repeatable")
    parser.add_argument("--export-scopes", action="append", default=[], metavar="FILE",
                        help="write the per-scope rows to FILE (.csv, .jsonl, .parquet)")
    parser.add_argument("--module", metavar="PATTERN", default=None,
                        help="only modules whose name matches PATTERN (fnmatch, e.g. 'jit_train_step*')")
    parser.add_argument("--sort", choices=SORT_KEYS, default="flops",
                        help="order of the summary's table: flops (heaviest first, default), ratio (worst XLA "
                             "undercount first), name, time (slowest to analyse first)")
    parser.add_argument("--top", type=_non_negative(int), default=20, help="rows in each summary table (default 20)")
    parser.add_argument("--memory-limit", type=_size, default=None, metavar="SIZE",
                        help="address-space limit of each worker process, e.g. 4G (default: the machine's memory "
                        "divided among the workers, at least 2G); a file that needs more gets a 'memory' row")
    parser.add_argument("--max-inflated-size", type=_size, default=None, metavar="SIZE",
                        help="refuse a gzip file that inflates beyond SIZE (default: 64x its size, "
                        "at least 256M, at most 4G)")
    parser.add_argument("--version", action="version", version=f"hloflops {package_version()}")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary on stdout")
    return parser


def cli_main(argv: list[str]) -> int:
    """`hloflops [batch] PATH... [options]`; returns the exit status."""
    argv = list(argv)
    if argv and argv[0] == "batch":
        argv = argv[1:]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code in (0, None) else EXIT_USAGE
    exports = [(f, "modules") for f in args.export] + [(f, "scopes") for f in args.export_scopes]
    args.db = os.fspath(default_db_path()) if args.db is None else args.db
    if not args.paths and not exports:
        parser.print_usage(sys.stderr)
        print("hloflops batch: error: give directories or files to analyse (or --export with --db)", file=sys.stderr)
        return EXIT_USAGE
    if args.processes is not None and args.processes < 1:
        print("hloflops batch: error: --processes must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if not args.paths and not os.path.exists(args.db):
        print(f"hloflops batch: error: no database {args.db} to export", file=sys.stderr)
        return EXIT_USAGE
    # Everything that can be checked is checked before any file is analysed or written.
    try:
        for out, _ in exports:
            export_format_for(out)
        check_database(args.db)
    except (ValueError, RuntimeError) as e:
        print(escape_controls(f"hloflops batch: error: {e}"), file=sys.stderr)
        return EXIT_USAGE
    processes = args.processes or default_processes()
    memory_limit = args.memory_limit or (default_memory_limit(processes) if args.scheduler is None else None)
    status = EXIT_OK
    if args.paths:
        try:
            summary = run_batch(
                args.paths,
                db=args.db,
                processes=args.processes,
                stage=args.stage,
                timeout_s=args.timeout or None,
                scheduler=args.scheduler,
                progress=not args.no_progress,
                scopes=args.scopes is not None,
                scope_depth=args.scopes or None,
                force=args.force,
                module=args.module,
                argv=["hloflops", "batch", *argv],
                max_inflated=args.max_inflated_size,
                memory_limit=memory_limit,
            )
        except KeyboardInterrupt:
            print("hloflops batch: interrupted; finished files are in the database, rerun to resume",
                  file=sys.stderr)
            return 130
        except RuntimeError as e:  # no dask, an unreachable scheduler, a database of another schema, no modules
            print(escape_controls(f"hloflops batch: error: {e}"), file=sys.stderr)
            return EXIT_USAGE
        if not args.quiet:
            sys.stdout.write(escape_controls(format_summary(summary, top=args.top, sort=args.sort,
                                                            width=output_width())))
        status = summary.exit_code
    for out, table in exports:
        try:
            with ResultsDB(args.db) as results:
                n = export(results, out, table=table)
        except (ValueError, RuntimeError, OSError) as e:
            print(escape_controls(f"hloflops batch: error: export to {out}: {e}"), file=sys.stderr)
            return EXIT_USAGE
        print(f"hloflops batch: wrote {n} {table} rows to {out}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(cli_main(sys.argv[1:]))
