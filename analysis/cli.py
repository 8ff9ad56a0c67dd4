"""`hloflops`: the command line.

    hloflops FILE|- [--json [--rows] | --csv] [--by scope|source|opcode|computation|module] [--depth N]
                    [--top N] [--trip-count NAME=N ...] [--folded PATH] [--html PATH] [--compare-xla]
                    [--strict] [--traceback]
    hloflops diff A B [--fail-above PCT] [--by ...] [--depth N] [--json]
    hloflops DIR ... | hloflops batch ...     (analysis.batch)

Exit codes: 0 success; 1 the analysis found what you asked it to fail on (`--strict` with an
unknown trip count or uncounted op, `diff --fail-above` exceeded); 2 usage or input error (bad
option, missing file, HLO that does not parse: one line, file:line:col); 3 internal error (a bug
in hloflops; `--traceback` shows it).

Start-up matters (people run this in loops and CI): nothing here imports jax, pandas or networkx
unless an option needs it.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from typing import Sequence

from analysis.report import GROUP_KEYS, Report, format_table, ratio

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
MAX_UNCOUNTED_LINES = 12  # beyond this the summary groups uncounted ops by kind


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


# ---- the readable summary ------------------------------------------------------------------
def _num(value: float | int) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"
    return f"{value:,}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def unknown_trip_text(bounds: tuple[int, int | None]) -> str:
    low, high = bounds
    if high is not None:
        return f"UNKNOWN ({low:,}..{high:,})"
    return f"UNKNOWN (>={low:,})" if low else "UNKNOWN"


def render_summary(report: Report, *, by: str = "scope", depth: int | None = 3, top: int = 15) -> str:
    xla = report.xla_estimate
    lines = [f"module {report.module_name}" + (f"  ({report.path})" if report.path else "")]
    if not report.is_exact:
        lines.append("NOTE: totals are LOWER BOUNDS: some trip counts or op costs are unknown (see below)")
    lines.append("")
    header = ["", "exact (loop-aware)", "XLA cost_analysis", "exact / XLA"]
    if report.xla_reported is not None:
        header.insert(3, "XLA via jax")
    table = []
    for label, key, exact in (
        ("flops", "flops", report.flops),
        ("transcendentals", "transcendentals", report.transcendentals),
        ("bytes accessed", "bytes_accessed", report.bytes_accessed),
    ):
        r = ratio(exact, xla[key])
        cells = [label, _num(exact), _num(xla[key]), "-" if r is None else f"{r:.2f}x"]
        if report.xla_reported is not None:
            live = report.xla_reported.get(key, report.xla_reported.get(key.replace("_", " "), 0.0))
            cells.insert(3, _num(float(live)))
        table.append(cells)
    lines += format_table(header, table)
    lines.append("")
    overhead = report.remat_overhead
    lines.append(
        f"model flops {report.model_flops:,}   remat flops {report.remat_flops:,}"
        + (f"   remat overhead +{overhead * 100:.1f}% over model flops" if overhead is not None else "")
    )
    phases = report.phase_flops
    lines.append(
        "phases: " + "   ".join(f"{p} {phases[p]:,} ({_pct(ratio(phases[p], report.flops))})" for p in phases)
    )
    lines.append("")
    if report.loops:
        lines.append(f"loops ({len(report.loops)}): XLA counts each body once; these are multiplied")
        rows = []
        for lp in report.loops:
            known = lp.trip_count is not None
            rows.append(
                [
                    lp.name,
                    f"{lp.trip_count:,}" if known else unknown_trip_text(lp.bounds),
                    lp.source,
                    f"{lp.executions:,}",
                    f"{lp.total.flops:,}" if known else f">={lp.total.flops:,}",
                    _pct(report.loop_share(lp)),
                    f"{lp.extra_over_xla.flops:,}" if known else "?",  # a lower bound minus XLA means nothing
                    lp.parent or "",
                ]
            )
        header = ["  loop", "trip count", "source", "executions", "flops", "share", "XLA misses", "inside"]
        lines += format_table(header, [["  " + r[0]] + r[1:] for r in rows], align="lrlrrrrl")
        for lp in report.loops:
            if lp.trip_count is None:
                lines.append(f"  ! {lp.name}: trip count unknown{': ' + lp.note if lp.note else ''} "
                             f"(give it with --trip-count {lp.name}=N)")
    else:
        lines.append("loops: none")
    if report.conditionals:
        lines.append("")
        lines.append(f"conditionals ({len(report.conditionals)}): the totals count the branch with the most FLOPs")
        for c in report.conditionals:
            costs = ", ".join(f"{b.index}: {b.cost.flops:,}" for b in c.branches)
            lines.append(f"  {c.name} x{c.executions:,}: branch flops {{{costs}}}; counted {c.chosen}, "
                         f"smallest {c.smallest}")
    lines.append("")
    groups = report.group_by(by, depth=depth if by in ("scope", "module") else None)
    title = f"top {min(top, len(groups))} of {len(groups)} by {by}"
    if by in ("scope", "module"):
        title += f" (depth {'all' if depth is None else depth})"
    lines.append(title)
    rows = [
        [
            "  " + g.key,
            f"{g.total.flops:,}",
            _pct(ratio(g.total.flops, report.flops)),
            f"{g.remat_flops:,}",
            f"{g.total.transcendentals:,}",
            f"{g.total.bytes_accessed:,}",
        ]
        for g in groups[:top]
    ]
    lines += format_table([f"  {by}", "flops", "share", "remat flops", "transcendentals", "bytes accessed"], rows)
    lines.append("")
    if report.uncounted:
        lines.append(f"UNCOUNTED ops ({len(report.uncounted)}): their cost is unknown and NOT in the totals")
        if len(report.uncounted) <= MAX_UNCOUNTED_LINES:
            for u in report.uncounted:
                target = f" target={u.target}" if u.target else ""
                lines.append(f"  ! {u.name} ({u.opcode}{target}) in {u.computation} x{u.executions:,}: {u.reason}")
        else:  # many: one line per kind, with a few names (all of them are in --json)
            kinds: dict[tuple[str, str, str], list[str]] = {}
            for u in report.uncounted:
                kinds.setdefault((u.opcode, u.target or "", u.reason), []).append(u.name)
            for (opcode, target, reason), names in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                what = opcode + (f" target={target}" if target else "")
                lines.append(f"  ! {len(names):,} x {what}: {reason} ({shown})")
    else:
        lines.append("uncounted ops: none")
    residual = report.accounting.reconciliation.get("residual")
    if residual:
        lines.append(f"reconciliation residual (not explained by loops): {residual:,} flops")
    return "\n".join(lines) + "\n"


# ---- argument parsing ------------------------------------------------------------------------
def _trip_count(text: str) -> tuple[str, int]:
    name, sep, value = text.rpartition("=")  # the name may hold "=" (an op_name pattern), N cannot
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=N, got {text!r}")
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"trip count of {name} must be an integer, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"trip count of {name} must be >= 0, got {n}")
    return name.lstrip("%"), n


def _depth(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"depth must be an integer, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("depth must be >= 0 (0: the whole name stack)")
    return n


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + exits 2 itself)
        raise UsageError(message)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", choices=GROUP_KEYS, default="scope", help="group the table by (default: scope)")
    p.add_argument("--depth", type=_depth, default=None,
                   help="scope depth: how many frames of the op_name name stack (default 3 in the text "
                        "summary, the whole stack in JSON/CSV; 0: the whole stack)")
    p.add_argument("--trip-count", type=_trip_count, action="append", default=[], metavar="NAME=N",
                   help="trip count of the while instruction NAME (overrides or fills in an unknown one); repeatable")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    p.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="hloflops",
        allow_abbrev=False,
        description="Exact, loop-aware FLOPs / transcendentals / bytes of an XLA HLO module, next to XLA's estimate.",
        epilog="Also: 'hloflops diff A B [--fail-above PCT]' and 'hloflops DIR|batch ...'. "
        "Exit codes: 0 ok, 1 --strict/--fail-above tripped, 2 usage or input error, 3 internal error.",
    )
    p.add_argument("file", help="HLO text file (compiled.as_text() or an XLA dump); '-' reads stdin")
    _add_common(p)
    p.add_argument("--csv", action="store_true",
                   help="print CSV: one line per instruction, or per group with --by given explicitly")
    p.add_argument("--rows", action="store_true", help="with --json: include one entry per instruction")
    p.add_argument("--top", type=int, default=15, help="lines of the grouped table in the summary (default 15)")
    p.add_argument("--folded", metavar="PATH", help="write folded stacks of FLOPs by scope (flamegraph.pl, speedscope)")
    p.add_argument("--folded-metric", choices=("flops", "transcendentals", "bytes_accessed"), default="flops")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML page with an icicle chart")
    p.add_argument("--compare-xla", action="store_true",
                   help="also ask XLA (through jax, imported only then) for its own numbers")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a trip count is unknown or an op's cost is uncounted")
    return p


def build_diff_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hloflops diff", allow_abbrev=False,
                description="FLOPs deltas between two HLO modules, total and per scope.")
    p.add_argument("a", help="the old module (HLO text file)")
    p.add_argument("b", help="the new module (HLO text file)")
    _add_common(p)
    p.add_argument("--top", type=int, default=20, help="lines of the per-group table (default 20)")
    p.add_argument("--fail-above", type=float, metavar="PCT", default=None,
                   help="exit 1 when B's FLOPs exceed A's by more than PCT percent (a CI budget)")
    return p


def _explicit(argv: Sequence[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in argv)


# ---- commands --------------------------------------------------------------------------------
def _load_report(path: str, trip_counts: dict[str, int], *, compare_xla: bool = False) -> Report:
    from analysis.api import analyze, compare

    if path == "-":  # HLO text on stdin: `python3 dump.py | hloflops -`
        text = sys.stdin.read()
        if not text.strip():
            raise UsageError("-: no HLO text on stdin")
        return compare(text, trip_counts=trip_counts or None).report if compare_xla else analyze(
            text, trip_counts=trip_counts or None)
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory")
    from analysis.api import JaxMissingError, XlaRejectedError
    from hloparse.attributes import AttributeSyntaxError

    try:
        if compare_xla:
            return compare(path, trip_counts=trip_counts or None).report
        return analyze(path, trip_counts=trip_counts or None)
    except AttributeSyntaxError as error:  # an attribute value decoded lazily, after parsing
        raise UsageError(f"{path}: malformed attribute: {error}") from None
    except (JaxMissingError, XlaRejectedError) as error:
        raise UsageError(f"--compare-xla: {error}") from None


def _check_trip_counts(trip_counts: dict[str, int], *reports: Report) -> None:
    """A --trip-count for a while instruction that does not exist is a typo, not a no-op.
    (Patterns with * ? [ match op_names and may legitimately match nothing.)"""
    names = {lp.name for r in reports for lp in r.loops}
    for key in trip_counts:
        if key not in names and not any(c in key for c in "*?["):
            known = ", ".join(sorted(names)) or "none"
            raise UsageError(f"--trip-count {key}=...: no while instruction named {key!r} (loops: {known})")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as error:
        raise UsageError(f"{path}: cannot write: {error.strerror}") from None


def _csv_text(report: Report, by: str | None, depth: int | None) -> str:
    buffer = io.StringIO()
    if by is None:
        records = report.to_records()
        fields = list(records[0]) if records else ["computation", "name", "opcode"]
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    else:
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([by, "flops", "transcendentals", "bytes_accessed", "remat_flops", "instructions", "executions",
                         "uncounted"])
        for g in report.group_by(by, depth=depth):
            writer.writerow([g.key, g.total.flops, g.total.transcendentals, g.total.bytes_accessed, g.remat_flops,
                             g.instructions, g.executions, g.uncounted])
    return buffer.getvalue()


def _run_file(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.json and args.csv:
        raise UsageError("--json and --csv are exclusive")
    trips = dict(args.trip_count)
    report = _load_report(args.file, trips, compare_xla=args.compare_xla)
    _check_trip_counts(trips, report)
    by_explicit = _explicit(argv, "--by")
    depth = args.depth or None  # 0 means the whole stack
    if args.folded:
        _write(args.folded, report.to_folded(args.folded_metric))
    if args.html:
        _write(args.html, report.to_html(depth=depth))
    if args.json:
        sys.stdout.write(report.to_json(by=(args.by,) if by_explicit else (), depth=depth, rows=args.rows))
    elif args.csv:
        sys.stdout.write(_csv_text(report, args.by if by_explicit else None, depth))
    else:
        summary_depth = 3 if args.depth is None else depth
        sys.stdout.write(render_summary(report, by=args.by, depth=summary_depth, top=args.top))
    if args.strict and not report.is_exact:
        unknown = [lp.name for lp in report.unknown_loops]
        what = []
        if unknown:
            what.append(f"{len(unknown)} unknown trip count(s) ({', '.join(unknown)})")
        if report.uncounted:
            what.append(f"{len(report.uncounted)} uncounted op(s)")
        print(f"hloflops: --strict: {'; '.join(what) or 'inexact execution counts'}", file=sys.stderr)
        return EXIT_FOUND
    return EXIT_OK


def _run_diff(argv: Sequence[str]) -> int:
    from analysis.diff import diff_reports, render_diff

    args = build_diff_parser().parse_args(argv)
    trips = dict(args.trip_count)
    a = _load_report(args.a, trips)
    b = _load_report(args.b, trips)
    _check_trip_counts(trips, a, b)
    depth = args.depth or None
    if not _explicit(argv, "--depth") and args.by == "scope":
        depth = 3
    result = diff_reports(a, b, by=args.by, depth=depth)
    if args.json:
        sys.stdout.write(result.to_json(fail_above=args.fail_above))
    else:
        sys.stdout.write(render_diff(result, top=args.top, fail_above=args.fail_above))
    if args.fail_above is not None and result.exceeds(args.fail_above):
        print(
            f"hloflops: FLOPs grew {result.flops_growth_text()} (budget {args.fail_above:g}%): {args.a} -> {args.b}",
            file=sys.stderr,
        )
        return EXIT_FOUND
    return EXIT_OK


_VALUE_OPTIONS = frozenset({"--by", "--depth", "--trip-count", "--top", "--folded", "--folded-metric", "--html"})


def _is_batch(argv: Sequence[str]) -> bool:
    """`hloflops batch ...`, or a positional argument that is a directory (not the value of an
    option such as `--html PATH`)."""
    if argv and argv[0] == "batch":
        return True
    previous = ""
    for arg in argv:
        if not arg.startswith("-") and previous not in _VALUE_OPTIONS and os.path.isdir(arg):
            return True
        previous = arg
    return False


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in argv or os.environ.get("HLOFLOPS_TRACEBACK") == "1"
    try:
        if argv and argv[0] == "diff":
            return _run_diff(argv[1:])
        if _is_batch(argv):
            from analysis.batch import cli_main

            return cli_main(argv[1:] if argv[0] == "batch" else argv)
        if not argv or argv[0] in ("-h", "--help"):
            build_parser().print_help()
            return EXIT_OK if argv else EXIT_USAGE
        return _run_file(argv)
    except UsageError as error:
        print(f"hloflops: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exit_:  # argparse --help
        return int(exit_.code or 0) if isinstance(exit_.code, int) or exit_.code is None else EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hloflops FILE | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as error:  # noqa: BLE001 - the one place that turns errors into a line
        if show_traceback:
            raise
        from hloparse.errors import HloParseError

        if isinstance(error, HloParseError):
            print(f"hloflops: error: {error.one_line()}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, (FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError)):
            print(f"hloflops: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"hloflops: internal error: {type(error).__name__}: {error} (rerun with --traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
