"""The closing summary of a batch (and of `hloflops run`): counts, then the modules in the order
asked for (`--sort flops|ratio|name|time`, heaviest first by default), then the other view a user
needs (the worst XLA undercounts, or the heaviest when the first table already ranks by
undercount), then the failures. `--module PATTERN` narrows the rows before any of this.
`BatchSummary` (what `run_batch` returns) lives here, so that this module needs nothing of run.py."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from hloflops.batch.db import OK
from hloflops.batch.programs import Program, programs, recompiled_lines
from hloflops.batch.progress import format_duration
from hloflops.report.fit import fit_text
from hloflops.report.format import format_table

EXIT_OK, EXIT_FAILED = 0, 1

SORT_KEYS = ("flops", "ratio", "name", "time")
TITLES = {
    "flops": "Heaviest modules first (exact FLOPs executed)",
    "ratio": "Worst XLA undercount first (exact FLOPs / XLA's estimate)",
    "name": "Modules by name",
    "time": "Slowest to analyse first (seconds of analysis)",
}


@dataclass(frozen=True)
class BatchSummary:
    db_path: str
    run_id: int
    files: int  # module files found
    analyzed: int  # attempted in this run (sent to a worker, or found unreadable)
    cached: int  # skipped: unchanged since a previous run
    failed: int  # rows whose status is not "ok" (this run's and cached ones)
    status_counts: Mapping[str, int]
    seconds: float
    total_bytes: int
    ignored: int  # dump side files and other stages
    missing_stage: tuple[str, ...]
    problems: tuple[tuple[str, str], ...]  # input paths that do not exist, directories not listed
    rows: tuple[dict[str, Any], ...] = field(repr=False, default=())  # this run's files, from the database
    module_pattern: str | None = None  # --module: only modules whose name matches are in `rows`
    filtered: int = 0  # module files left out by module_pattern
    skipped: tuple[tuple[str, str], ...] = ()  # (path, why): files found that hold no HLO (notes, logs)

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.failed or self.problems else EXIT_OK


def module_matches(name: str | None, pattern: str | None) -> bool:
    """`--module PATTERN`: fnmatch (case-sensitive) on the module name; no pattern keeps all."""
    return pattern is None or (name is not None and fnmatch.fnmatchcase(name, pattern))


def sort_rows(rows: Iterable[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    """Rows in `--sort` order; ties broken by path so the order is the same on every run."""
    if by not in SORT_KEYS:
        raise ValueError(f"cannot sort by {by!r}; choose one of {', '.join(SORT_KEYS)}")
    keys = {
        "flops": lambda r: (-(r["flops"] or 0), r["path"]),
        # modules without a positive XLA number (no ratio) after the rest
        "ratio": lambda r: (r["ratio"] is None, -(r["ratio"] or 0.0), -(r["flops"] or 0), r["path"]),
        "name": lambda r: (r["module_name"] or "", r["path"]),
        "time": lambda r: (-(r["seconds"] or 0.0), r["path"]),
    }
    return sorted(rows, key=keys[by])


def compile_counts(rows: Iterable[dict[str, Any]]) -> dict[str, Program]:
    """Each analysed row's program (`hloflops.batch.programs`), by path: its label and how many
    times XLA compiled it in the row's dump."""
    return programs(rows)


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


# Where a table does not fit the width even with its names elided, these columns go first, in order.
DROP_FIRST = ("unknown", "uncounted", "loops", "XLA flops", "remat")


def _table(header: list[str], rows: list[list[str]], right: set[int], width: int | None = None) -> list[str]:
    """Columns after a two-space indent; with `width`, the name columns (the left-aligned ones)
    are elided in the middle to fit it, then the DROP_FIRST columns left out."""
    left = [i for i in reversed(range(len(header))) if i not in right]  # the path before the module
    align = "".join("r" if i in right else "l" for i in range(len(header)))
    drop = [header.index(h) for h in DROP_FIRST if h in header]
    lines = format_table(header, rows, align=align, width=None if width is None else width - 2, elide=left,
                         drop=drop)
    return ["  " + line if line else line for line in lines]


def modules_table(rows: Sequence[dict[str, Any]], counts: Mapping[str, Program], *, lead: str = "flops",
                  paths: bool = True, seconds: bool = False, width: int | None = None) -> list[str]:
    """One line per module. `lead` is the first column ("flops" or "ratio", what the table ranks
    by); `compiled` is how many times XLA compiled that program in its dump (`counts`, from
    `compile_counts`), and the module column names the program (`jit_f#2` where names are shared)."""
    ratio_cell = [lambda r: f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"]
    flops_cell = [lambda r: f"{r['flops']:,}"]
    cells = (ratio_cell + flops_cell) if lead == "ratio" else (flops_cell + ratio_cell)
    header = ["ratio", "exact flops"] if lead == "ratio" else ["exact flops", "ratio"]
    header += ["XLA flops", "compiled", "loops", "unknown", "uncounted", "remat"]
    cells += [
        lambda r: f"{r['xla_flops']:,.0f}" if r["xla_flops"] is not None else "-",
        lambda r: str(_program(counts, r).compiled),
        lambda r: str(r["n_loops"]),
        lambda r: str(r["n_unknown_trip_counts"]),
        lambda r: str(r["n_uncounted"]),
        lambda r: f"{r['remat_flops']:,}",
    ]
    if seconds:
        header.append("seconds")
        cells.append(lambda r: f"{r['seconds'] or 0.0:.2f}")
    header.append("module")
    cells.append(lambda r: _program(counts, r).label)
    if paths:
        header.append("path")
        cells.append(lambda r: display_path(r["path"]))
    table = [[cell(r) for cell in cells] for r in rows]
    return _table(header, table, right=set(range(len(header) - (2 if paths else 1))), width=width)


def fold_programs(rows: Sequence[dict[str, Any]], counts: Mapping[str, Program]) -> list[dict[str, Any]]:
    """One row per program (a module name and fingerprint in one dump directory: see
    hloflops.batch.programs), the first of its files in `rows`' order: the heaviest, or the worst
    undercount, of its compilations. Its `compiled` column says how many files were folded."""
    seen: set[tuple[str, str]] = set()
    out = []
    for row in rows:
        key = (os.path.dirname(row["path"]), _program(counts, row).label)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _program(counts: Mapping[str, Program], row: dict[str, Any]) -> Program:
    return counts.get(row["path"]) or Program(row["module_name"] or "", 1)


def format_summary(summary: BatchSummary, *, top: int = 20, sort: str = "flops", paths: bool = True,
                   prog: str = "hloflops batch", db_label: str | None = None, width: int | None = None) -> str:
    """The closing report: counts, the modules in `sort` order, the other ranking (worst XLA
    undercount, or heaviest when sorting by ratio), then the failures."""
    mb = summary.total_bytes / (1024 * 1024)
    lines = [
        f"{prog}: {summary.files} module files, {mb:.1f} MB: {summary.analyzed} analysed, "
        f"{summary.cached} unchanged (cached), {summary.failed} failed, in {format_duration(summary.seconds)} "
        f"-> {db_label or f'{summary.db_path} (run {summary.run_id})'}",
        "  status: " + ", ".join(f"{status} {n}" for status, n in sorted(summary.status_counts.items())),
    ]
    if summary.ignored:
        lines.append(f"  ignored {summary.ignored} dump side files / other stages")
    if summary.skipped:
        lines.append(f"  skipped {len(summary.skipped)} files that hold no HLO:")
        for path, why in summary.skipped[:top]:
            lines.append(f"    {display_path(path)}: {why}")
        if len(summary.skipped) > top:
            lines.append(f"    ... and {len(summary.skipped) - top} more")
    if summary.missing_stage:
        lines.append(f"  {len(summary.missing_stage)} dump modules have no text of the selected stage, e.g. "
                     f"{summary.missing_stage[0]}")
    if summary.module_pattern is not None:
        lines.append(f"  --module {summary.module_pattern}: {len(summary.rows)} modules match, "
                     f"{summary.filtered} others left out")
    for path, why in summary.problems:
        lines.append(f"  problem: {path}: {why}")
    counts = compile_counts(summary.rows)
    ok_rows = [r for r in summary.rows if r["status"] == OK]
    if ok_rows:
        second = "flops" if sort == "ratio" else "ratio"
        n_programs = len(fold_programs(ok_rows, counts))
        of = f"{n_programs} programs" + (f" in {len(ok_rows)} files" if n_programs != len(ok_rows) else "")
        for by in (sort, second):
            shown = fold_programs(sort_rows(ok_rows, by), counts)[:top]
            lines += ["", f"{TITLES[by]}, top {len(shown)} of {of}:"]
            lines += modules_table(shown, counts, lead="ratio" if by == "ratio" else "flops", paths=paths,
                                   seconds=by == "time", width=width)
        recompiled = recompiled_lines(ok_rows, top=top, width=width)
        lines += [""] + recompiled if recompiled else []
    failed_rows = sorted((r for r in summary.rows if r["status"] != OK), key=lambda r: (r["status"], r["path"]))
    if failed_rows:
        lines += ["", f"Failed files ({len(failed_rows)}{', first ' + str(top) if len(failed_rows) > top else ''}):"]
        for r in failed_rows[:top]:
            lines.append(f"  {r['status']:<11}  {display_path(r['path'])}: {r['error']}")
    return fit_text("\n".join(lines) + "\n", width)
