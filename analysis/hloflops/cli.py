"""`hloflops`: the command line.

    hloflops FILE|- [--json [--rows] | --csv] [--by scope|source|function|opcode|computation|module]
                    [--frames user|library|all] [--user-code PATH] [--library NAME] [--depth N]
                    [--top N] [--trip-count NAME=N ...] [--folded PATH] [--html PATH] [--compare-xla]
                    [--strict] [--traceback]
    hloflops diff A B [--fail-above PCT] [--by ...] [--depth N] [--json]
    hloflops DIR ... | hloflops batch ...     (hloflops.batch.run)
    hloflops run [options] -- COMMAND ...     (hloflops.batch.run_command)

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
import gc
import io
import os
import sys
from itertools import chain
from typing import TYPE_CHECKING, Any, Sequence

# The report layer (and through it the parser, lark, numpy) is imported by the commands that use
# it, not here: `hloflops --version` and `--help` answer in the time Python takes to start.
if TYPE_CHECKING:
    from hloflops.report.report import Report

# hloflops.report.report.GROUP_KEYS, spelt here so that building the parser imports no report code;
# tests/packaging/test_small_errors.py checks that the two agree.
GROUP_KEYS = ("opcode", "computation", "scope", "source", "function", "module")
FRAMES = ("user", "library", "all")  # hloflops.report.report.FRAMES, checked the same way

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


# ---- argument parsing ------------------------------------------------------------------------
def _trip_count(text: str) -> tuple[str, int]:
    name, sep, value = text.rpartition("=")  # the name may hold "=" (an op_name pattern), N cannot
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=N, got {text!r}")
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"trip count of {name} must be an integer, got {value!r}") from None
    if not 0 <= n <= 2**63 - 1:  # XLA's trip counts are int64s
        raise argparse.ArgumentTypeError(f"trip count of {name} must be between 0 and 2**63-1, got {n}")
    return name.lstrip("%"), n


def _count(text: str) -> int:
    """--top N: a count of lines, 0 or more."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def version() -> str:
    from hloflops import __version__  # pyproject's version is read from it: the two cannot differ

    return __version__


def escape_controls(text: str) -> str:
    """hloflops.report.format.escape_controls, imported when first needed (see the imports)."""
    from hloflops.report.format import escape_controls as escape

    return escape(text)


def csv_cell(value: object) -> object:
    """hloflops.report.format.csv_cell, imported when first needed."""
    from hloflops.report.format import csv_cell as cell

    return cell(value)


def range_reason(report: Report) -> str:
    """hloflops.report.conditionals.range_reason, imported when first needed."""
    from hloflops.report.conditionals import range_reason as reason

    return reason(report)


def output_width() -> int | None:
    """hloflops.report.fit.output_width, imported when first needed."""
    from hloflops.report.fit import output_width as width

    return width()


def render_summary(report: Report, **options: Any) -> str:
    """hloflops.report.text.render_summary, imported when first needed."""
    from hloflops.report.text import render_summary as render

    return render(report, **options)


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
    p.add_argument("--frames", choices=FRAMES, default="user",
                   help="with --by source|function: the user's frame of each op's call stack (default), the "
                        "innermost (library) frame, or all: both, as 'user > library'")
    p.add_argument("--user-code", action="append", default=[], metavar="PATH|NAME",
                   help="files under this path or directory name are your code even where installed; repeatable")
    p.add_argument("--library", action="append", default=[], metavar="NAME",
                   help="a package whose frames are not your code (beside jax, flax, optax, ...); repeatable")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    p.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="hloflops",
        allow_abbrev=False,
        description="Exact, loop-aware FLOPs / transcendentals / bytes of an XLA HLO module, next to XLA's estimate.",
        epilog="Also: 'hloflops diff A B [--fail-above PCT]', 'hloflops DIR|batch ...' and "
        "'hloflops run [options] -- python train.py ...'. "
        "Exit codes: 0 ok, 1 --strict/--fail-above tripped, 2 usage or input error, 3 internal error.",
    )
    p.add_argument("file", help="HLO text file (compiled.as_text() or an XLA dump); '-' reads stdin")
    p.add_argument("--version", action="version", version=f"hloflops {version()}")
    _add_common(p)
    p.add_argument("--csv", action="store_true",
                   help="print CSV: one line per instruction, or per group with --by given explicitly")
    p.add_argument("--rows", action="store_true", help="with --json: include one entry per instruction")
    p.add_argument("--top", type=_count, default=15, help="lines of the grouped table in the summary (default 15)")
    p.add_argument("--folded", metavar="PATH", help="write folded stacks of FLOPs by scope (flamegraph.pl, speedscope)")
    p.add_argument("--folded-metric", choices=("flops", "transcendentals", "bytes_accessed"), default="flops")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML page with an icicle chart")
    p.add_argument("--compare-xla", action="store_true",
                   help="also ask XLA (through jax, imported only then) for its own numbers")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a trip count is unknown or an op's cost is uncounted")
    p.add_argument("--chip", metavar="NAME|SPEC.json",
                   help="add the static roofline on this chip (a100, h100, h200, b200, tpu-v4, tpu-v5e, "
                        "tpu-v5p, tpu-v6e, or a JSON spec)")
    return p


def build_diff_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hloflops diff", allow_abbrev=False,
                description="FLOPs deltas between two HLO modules, total and per scope.")
    p.add_argument("a", help="the old module (HLO text file)")
    p.add_argument("b", help="the new module (HLO text file)")
    _add_common(p)
    p.add_argument("--top", type=_count, default=20, help="lines of the per-group table (default 20)")
    p.add_argument("--fail-above", type=float, metavar="PCT", default=None,
                   help="exit 1 when B's FLOPs exceed A's by more than PCT percent (a CI budget)")
    return p


def _explicit(argv: Sequence[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in argv)


# ---- commands --------------------------------------------------------------------------------
def _user_code(args: argparse.Namespace) -> Any:
    """The rule for the user's frame (hloflops.user_code) with --user-code / --library added."""
    from hloflops.user_code import DEFAULT

    return DEFAULT.with_options(user=args.user_code, library=args.library)


def _load_report(path: str, trip_counts: dict[str, int], *, compare_xla: bool = False, user_code: Any = None) -> Report:
    report = _analyze(path, trip_counts, compare_xla=compare_xla)
    if user_code is not None:
        report.user_code = user_code
    return report


def _analyze(path: str, trip_counts: dict[str, int], *, compare_xla: bool = False) -> Report:
    from hloflops.api import analyze, compare

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
    from hloflops.api import JaxMissingError, XlaRejectedError
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


def _unlimit_int_digits() -> None:
    """Exact counts may have more than the 4,300 digits Python prints by default (f32 with
    100,000 dimensions). Lifted only once the input is read: the limit guards int() of text."""
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)


def _csv_text(report: Report, by: str | None, depth: int | None, frames: str = "user") -> str:
    from hloparse.allocation import long_lived_objects

    with long_lived_objects():  # a view, built without the collector as the report's own are
        return _csv_view(report, by, depth, frames)


def _csv_view(report: Report, by: str | None, depth: int | None, frames: str) -> str:
    buffer = io.StringIO()
    if by is None:
        from hloflops.report.format import csv_cell as cell

        records = report.to_records()
        fields = list(records[0]) if records else ["computation", "name", "opcode"]
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(fields)
        # Every record has the fields in this order (one dict literal makes them): its values are
        # the row, without DictWriter's check of each record's keys.
        if _spreadsheet_safe([r.values() for r in records], cell):
            writer.writerows(r.values() for r in records)
        else:  # some text a spreadsheet would run (hloflops.report.format.csv_cell): every cell checked
            writer.writerows([cell(v) for v in r.values()] for r in records)
    else:
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([by, "flops", "transcendentals", "bytes_accessed", "remat_flops", "instructions", "executions",
                         "uncounted"])
        for g in report.group_by(by, depth=depth, frames=frames):
            writer.writerow([csv_cell(g.key), g.total.flops, g.total.transcendentals, g.total.bytes_accessed,
                             g.remat_flops, g.instructions, g.executions, g.uncounted])
    return buffer.getvalue()


def _spreadsheet_safe(rows: list[Any], cell: Any) -> bool:
    """Whether `cell` (format.csv_cell) leaves every value of these rows as it is. Each distinct value
    is asked once: on a 30 MB module 4.7 million cells hold 0.2 million distinct values (0.2 s, not 0.6)."""
    return all(cell(value) is value for value in set(chain.from_iterable(rows)))


def _chip(name: str):
    from hloflops.report.chips import load_chip

    try:
        return load_chip(name)
    except ValueError as error:
        raise UsageError(f"--chip: {error}") from None


def _run_file(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.json and args.csv:
        raise UsageError("--json and --csv are exclusive")
    trips = dict(args.trip_count)
    chip = _chip(args.chip) if args.chip else None
    report = _load_report(args.file, trips, compare_xla=args.compare_xla, user_code=_user_code(args))
    _check_trip_counts(trips, report)
    _unlimit_int_digits()
    by_explicit = _explicit(argv, "--by")
    depth = args.depth or None  # 0 means the whole stack
    if args.folded:
        _write(args.folded, report.to_folded(args.folded_metric))
    if args.html:
        _write(args.html, report.to_html(depth=depth, chip=chip))
    if args.json:
        sys.stdout.write(report.to_json(by=(args.by,) if by_explicit else (), depth=depth, rows=args.rows,
                                        chip=chip, frames=args.frames))
    elif args.csv:
        sys.stdout.write(escape_controls(_csv_text(report, args.by if by_explicit else None, depth, args.frames)))
    else:
        summary_depth = 3 if args.depth is None else depth
        sys.stdout.write(escape_controls(render_summary(report, by=args.by, depth=summary_depth, top=args.top,
                                                        chip=chip, width=output_width(), frames=args.frames)))
    if args.strict and not report.is_exact:
        unknown = [lp.name for lp in report.unknown_loops]
        what = []
        if unknown:
            what.append(f"{len(unknown)} unknown trip count(s) ({', '.join(unknown)})")
        if report.uncounted:
            what.append(f"{len(report.uncounted)} uncounted op(s)")
        if report.unresolved_conditionals:  # the totals are a range (hloflops.report.conditionals)
            what.append(range_reason(report))
        print(f"hloflops: --strict: {'; '.join(what) or 'inexact execution counts'}", file=sys.stderr)
        return EXIT_FOUND
    return EXIT_OK


def _run_diff(argv: Sequence[str]) -> int:
    from hloflops.report.diff import diff_reports, render_diff

    args = build_diff_parser().parse_args(argv)
    trips = dict(args.trip_count)
    a = _load_report(args.a, trips, user_code=_user_code(args))
    b = _load_report(args.b, trips, user_code=_user_code(args))
    _check_trip_counts(trips, a, b)
    _unlimit_int_digits()
    depth = args.depth or None
    if not _explicit(argv, "--depth") and args.by == "scope":
        depth = 3
    result = diff_reports(a, b, by=args.by, depth=depth)
    if args.json:
        sys.stdout.write(result.to_json(fail_above=args.fail_above))
    else:
        sys.stdout.write(escape_controls(render_diff(result, top=args.top, fail_above=args.fail_above,
                                                     width=output_width())))
    if args.fail_above is not None and result.exceeds(args.fail_above):
        print(
            f"hloflops: FLOPs grew {result.flops_growth_text()} (budget {args.fail_above:g}%): {args.a} -> {args.b}",
            file=sys.stderr,
        )
        return EXIT_FOUND
    return EXIT_OK


_VALUE_OPTIONS = frozenset({"--by", "--depth", "--trip-count", "--top", "--folded", "--folded-metric", "--html",
                            "--chip", "--frames", "--user-code", "--library"})


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
    """The command: `argv` (default: the process's arguments). Returns the exit status."""
    if argv is not None:  # called from Python (tests, a caller's script): leave its collector alone
        return _main(list(argv))
    try:
        return _main(sys.argv[1:])
    finally:
        # The process ends when this returns. What the command built (the report holds cycles) would be
        # found by the full collection Python runs at exit, after a scan of every object: ~1 s of a
        # 30 MB module's 3.9. Frozen, it is left to the process's end. (Frozen earlier, right after the
        # analysis, every view would pay `gc.get_freeze_count()`, a walk over the frozen objects that
        # hloparse.allocation.long_lived_objects asks for: 0.07 s each.)
        gc.freeze()


def _main(argv: list[str]) -> int:
    show_traceback = "--traceback" in argv or os.environ.get("HLOFLOPS_TRACEBACK") == "1"
    try:
        if argv and argv[0] == "diff":
            return _run_diff(argv[1:])
        if argv and argv[0] == "run":
            from hloflops.batch.run_command import cli_main as run_main

            return run_main(argv[1:])
        if _is_batch(argv):
            from hloflops.batch.run import cli_main

            return cli_main(argv[1:] if argv[0] == "batch" else argv)
        if argv and argv[0] == "--version":
            print(f"hloflops {version()}")
            return EXIT_OK
        if not argv or argv[0] in ("-h", "--help"):
            build_parser().print_help()
            return EXIT_OK if argv else EXIT_USAGE
        return _run_file(argv)
    except UsageError as error:
        print(escape_controls(f"hloflops: error: {error}"), file=sys.stderr)
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
            print(escape_controls(f"hloflops: error: {error.one_line()}"), file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, (FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError)):
            print(escape_controls(f"hloflops: error: {error}"), file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, MemoryError):  # the input is too big for this machine, not a bug
            print("hloflops: error: out of memory reading the input", file=sys.stderr)
            return EXIT_USAGE
        print(escape_controls(f"hloflops: internal error: {type(error).__name__}: {error} (rerun with --traceback)"),
              file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
