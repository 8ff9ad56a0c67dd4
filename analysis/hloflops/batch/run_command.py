"""`hloflops run [options] -- python train.py ARGS...`: run a command with XLA dumping every module
it compiles into a fresh directory, then analyse them all and say where the FLOPs went.

    result = run_command(["python", "examples/train_mlp.py"])
    result.exit_code, result.command_exit_code, result.summary.rows, result.top_report

How the command runs:
- `XLA_FLAGS` is the user's, with ours appended (`--xla_dump_to=DIR --xla_dump_hlo_as_text
  --xla_dump_include_timestamp`): XLA reads the last value of a flag, and every other flag the
  user set (`--xla_dump_hlo_pass_re`, `--xla_force_host_platform_device_count`, ...) still
  applies. A `--xla_dump_to` of the user's is dropped (this run's directory replaces it).
- The timestamp prefix XLA then writes into each file name keeps modules of several processes
  apart (a script that forks or spawns workers: each child inherits the environment and dumps
  into the same directory, and their module ids would otherwise collide).
- XLA always writes the text before and after optimizations; the after-optimizations text (what
  runs) is analysed unless `--stage` asks for another.
- The command's stdin, stdout and stderr are the user's. While it runs, hloflops ignores SIGINT:
  Ctrl-C in a terminal reaches the command too (same process group), the command stops as it
  chooses, and what XLA dumped until then is analysed. SIGTERM is passed on to the command.
- Its exit code is reported; when it is not 0 it is also ours (128+N for a signal N, as shells
  say); else ours is the batch's (0, or 1 when some module failed to analyse).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from hloflops.batch.db import OK
from hloflops.batch.discovery import AFTER_OPTIMIZATIONS
from hloflops.batch.run import DEFAULT_TIMEOUT_S, BatchSummary, NoModulesFound, run_batch
from hloflops.report.fit import fit_text, output_width
from hloflops.batch.summary import SORT_KEYS, compile_counts, format_summary, modules_table, sort_rows

EXIT_USAGE = 2
DUMP_FLAGS = ("--xla_dump_hlo_as_text", "--xla_dump_include_timestamp")


class RunUsageError(Exception):
    """Bad options (exit 2)."""


@dataclass
class RunResult:
    command: list[str]
    command_exit_code: int | None  # None: the command could not be started
    command_seconds: float
    dump_dir: str
    kept: bool
    summary: BatchSummary | None
    top_report: Any = None  # the hloflops.Report of the top module, None when nothing was analysed (or not asked)
    # (path, top, width, text): the top module's summary as its batch worker rendered it, None when not asked
    # or its row came from the database's cache
    top_summary: tuple[str, int, int | None, str] | None = None
    # (path, page): the top module's HTML page as its batch worker rendered it (worker.PAGE_PREAMBLE where the
    # modules table goes), None when not asked or its row came from the database's cache
    top_page: tuple[str, str] | None = None
    flags_note: str = ""
    db_kept: bool = False

    @property
    def exit_code(self) -> int:
        if self.command_exit_code is None:
            return 127  # as a shell says for a command it cannot run
        if self.command_exit_code != 0:
            return 128 - self.command_exit_code if self.command_exit_code < 0 else self.command_exit_code
        return self.summary.exit_code if self.summary is not None else 0


def merge_xla_flags(user_flags: str, dump_dir: str) -> tuple[str, str]:
    """XLA_FLAGS for the command: the user's flags, without their `--xla_dump_to`, then ours.
    Returns (flags, a note for the user, empty when nothing of theirs was replaced)."""
    kept, dropped = [], []
    for flag in user_flags.split():
        (dropped if flag.startswith("--xla_dump_to=") or flag == "--xla_dump_to" else kept).append(flag)
    ours = [f"--xla_dump_to={dump_dir}", *DUMP_FLAGS]
    note = f"XLA_FLAGS: {' '.join(dropped)} replaced by this run's dump directory" if dropped else ""
    return " ".join([*kept, *ours]), note


def command_env(base: Mapping[str, str], dump_dir: str) -> tuple[dict[str, str], str]:
    env = dict(base)
    env["XLA_FLAGS"], note = merge_xla_flags(env.get("XLA_FLAGS", ""), dump_dir)
    # A hit in jax's persistent compilation cache compiles (and so dumps) nothing.
    env.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
    return env, note


def _run(command: Sequence[str], env: Mapping[str, str]) -> int | None:
    """Run the command to its end; its return code (negative: killed by that signal), None when
    it cannot be started."""
    try:
        proc = subprocess.Popen(list(command), env=dict(env))
    except OSError as error:
        print(f"hloflops run: cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        return None
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:  # pragma: no cover - wait() retries on EINTR itself
                continue
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


def _fresh_dump_dir(keep: str | None, workdir: str) -> str:
    if keep is None:
        path = os.path.join(workdir, "dump")
        os.mkdir(path)
        return path
    if any(c.isspace() for c in keep):
        raise RunUsageError(f"--keep {keep!r}: the path must not contain spaces (XLA_FLAGS is split on them)")
    if os.path.exists(keep) and (not os.path.isdir(keep) or os.listdir(keep)):
        raise RunUsageError(f"--keep {keep}: exists and is not an empty directory (the dump must be this run's only)")
    os.makedirs(keep, exist_ok=True)
    return os.path.abspath(keep)


def run_command(
    command: Sequence[str],
    *,
    keep: str | None = None,
    db: str | None = None,
    module: str | None = None,
    stage: str = AFTER_OPTIMIZATIONS,
    processes: int | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    progress: bool = True,
    env: Mapping[str, str] | None = None,
    sort: str = "flops",
    summary: tuple[int, int | None] | None = None,
    top_report: bool = True,
    page: bool = False,
) -> RunResult:
    """Run `command` with XLA dumping, then analyse every module it compiled (see the module
    docstring). `keep`: dump into this (new or empty) directory and leave it there; else a
    temporary one is removed at the end. `db`: the SQLite database (default: a temporary one).
    `summary=(top, width)`: the batch workers also render each module's summary, and the top
    module's is kept (`result.top_summary`); `page=True`: likewise its HTML page (`result.top_page`, for
    `run_page`). `top_report=False`: build `result.top_report` only when what was asked of the workers is
    missing (the top module's row was cached), so the top module is analysed once."""
    if not command:
        raise RunUsageError("give the command to run after '--', e.g. hloflops run -- python train.py")
    workdir = tempfile.mkdtemp(prefix="hloflops-run-")
    try:
        dump_dir = _fresh_dump_dir(keep, workdir)
        child_env, note = command_env(os.environ if env is None else env, dump_dir)
        if note:
            print(f"hloflops run: {note}", file=sys.stderr)
        started = time.monotonic()
        code = _run(command, child_env)
        seconds = time.monotonic() - started
        result = RunResult(list(command), code, seconds, dump_dir, keep is not None, None, flags_note=note,
                           db_kept=db is not None)
        if code is None:
            return result
        texts: dict[str, str] = {}
        pages: dict[str, str] = {}

        def keep_summary(path: str, record: dict[str, Any]) -> None:
            if "summary_text" in record:
                texts[path] = record.pop("summary_text")
            if "page_html" in record:
                pages[path] = record.pop("page_html")

        try:
            result.summary = run_batch(
                [dump_dir], db=db or os.path.join(workdir, "hloflops.sqlite"), processes=processes, stage=stage,
                timeout_s=timeout_s, progress=progress, module=module, argv=["hloflops", "run", *command],
                summary=None if summary is None else (*summary, keep is not None), page=page,
                on_result=keep_summary)
        except NoModulesFound:  # the command dumped no module: an empty summary says so below
            result.summary = BatchSummary(db or "", 0, 0, 0, 0, 0, {}, 0.0, 0, 0, (), (), module_pattern=module)
            return result
        ok = [r for r in result.summary.rows if r["status"] == OK]
        if ok:
            top_path = sort_rows(ok, sort)[0]["path"]
            if summary is not None and top_path in texts:
                result.top_summary = (top_path, *summary, texts[top_path])
            if page and top_path in pages:
                result.top_page = (top_path, pages[top_path])
            if top_report or result.top_summary is None or (page and result.top_page is None):
                from hloflops.api import analyze

                result.top_report = analyze(top_path)
                if keep is None:
                    result.top_report.path = None  # the temporary dump is about to go
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ---- what it prints --------------------------------------------------------------------------
def describe_exit(code: int | None) -> str:
    if code is None:
        return "could not be started"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def format_run(result: RunResult, *, top: int = 10, sort: str = "flops", width: int | None = None) -> str:
    """The closing report of `hloflops run`, fitted to `width` (hloflops.report.fit)."""
    return fit_text(_run_text(result, top=top, sort=sort, width=width), width)


def _run_text(result: RunResult, *, top: int, sort: str, width: int | None) -> str:
    command = " ".join(result.command)
    where = f"kept in {result.dump_dir}" if result.kept else "removed"
    lines = [f"hloflops run: `{command}` {describe_exit(result.command_exit_code)} "
             f"after {result.command_seconds:.1f} s; dump {where}"]
    if result.summary is None:
        return "\n".join(lines) + "\n"
    if not result.summary.rows:
        lines.append("hloflops run: XLA compiled no module (does the command run jax? is --module too narrow?)")
        return "\n".join(lines) + "\n"
    db_label = None if result.db_kept else "a temporary database (--db PATH keeps one)"
    text = format_summary(result.summary, top=top, sort=sort, paths=result.kept, prog="hloflops run",
                          db_label=db_label, width=width)
    lines.append(text.rstrip("\n"))
    top_row = next(iter(sort_rows([r for r in result.summary.rows if r["status"] == OK], sort)), None)
    top_text = None
    if top_row is not None and result.top_summary is not None \
            and result.top_summary[:3] == (top_row["path"], top, width):
        top_text = result.top_summary[3]  # rendered by the batch worker: the module is not analysed again
    elif top_row is not None and result.top_report is not None:
        top_text = result.top_report.summary(top=top, width=width)
    if top_text is not None:
        program = compile_counts(result.summary.rows).get(top_row["path"])
        label, compiled = (program.label, program.compiled) if program else (top_row["module_name"], 1)
        lines += ["", f"Top module: {label} (XLA compiled this program {compiled} time"
                      f"{'s' if compiled != 1 else ''})", ""]
        lines.append(top_text.rstrip("\n"))
    return "\n".join(lines) + "\n"


def run_page(result: RunResult, *, sort: str = "flops") -> str:
    """The --html page: the modules table, then the top module's summary and chart."""
    from hloflops.batch.worker import PAGE_PREAMBLE
    from hloflops.report.html import render_html

    assert result.summary is not None and (result.top_report is not None or result.top_page is not None)
    ok = sort_rows([r for r in result.summary.rows if r["status"] == OK], sort)
    table = "\n".join(modules_table(ok, compile_counts(result.summary.rows), paths=result.kept))
    if result.top_page is not None and result.top_page[0] == ok[0]["path"]:  # rendered by the batch worker
        name, page = ok[0]["module_name"], result.top_page[1]
    else:
        name, page = result.top_report.module_name, render_html(result.top_report, preamble_html=PAGE_PREAMBLE)
    preamble = (f"<h2>Modules of `{' '.join(result.command)}` ({describe_exit(result.command_exit_code)})</h2>"
                f"<pre>{_escape(table)}</pre><h2>Top module: {_escape(name)}</h2>")
    return page.replace(PAGE_PREAMBLE, preamble, 1)


def _escape(text: str) -> str:
    import html

    return html.escape(text)


# ---- command line ----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hloflops run",
        description="Run a command (a jax training script) with XLA dumping every module it compiles, then "
        "analyse them: the heaviest modules first, and the top one's summary.",
        usage="hloflops run [options] -- COMMAND [ARGS...]",
        epilog="Exit status: the command's when it is not 0 (128+N when killed by signal N); else 0, or 1 "
        "when a module failed to analyse; 2 usage; 127 the command cannot be started.",
    )
    parser.add_argument("--keep", metavar="DIR", help="dump into DIR (new or empty) and keep it")
    parser.add_argument("--db", metavar="PATH", help="also keep the SQLite database of the modules at PATH")
    parser.add_argument("--html", metavar="PATH", help="write one page: the modules table and the top module's chart")
    parser.add_argument("--module", metavar="PATTERN", help="only modules whose name matches (fnmatch)")
    parser.add_argument("--sort", choices=SORT_KEYS, default="flops", help="order of the modules (default flops)")
    parser.add_argument("--top", type=int, default=10, help="rows in each table (default 10)")
    parser.add_argument("--stage", default=AFTER_OPTIMIZATIONS,
                        help="which dumped text to analyse (default after_optimizations; before_optimizations, all)")
    parser.add_argument("-j", "--processes", type=int, default=None, help="analysis processes (default: all cores)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per-module analysis time limit")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


_VALUE_OPTIONS = frozenset({"--keep", "--db", "--html", "--module", "--sort", "--top", "--stage", "-j",
                            "--processes", "--timeout"})


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(our options, the command): the command follows `--`, or starts at the first argument
    that is neither an option nor an option's value."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    previous = ""
    for i, arg in enumerate(argv):
        if not arg.startswith("-") and previous not in _VALUE_OPTIONS:
            return argv[:i], argv[i:]
        previous = arg
    return argv, []


def cli_main(argv: Sequence[str]) -> int:
    """`hloflops run [options] -- COMMAND...`; returns the exit status."""
    options, command = split_command(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(options)
    except SystemExit as e:
        return 0 if e.code in (0, None) else EXIT_USAGE
    try:
        width = output_width()
        result = run_command(command, keep=args.keep, db=args.db, module=args.module, stage=args.stage,
                             processes=args.processes, timeout_s=args.timeout or None,
                             progress=not args.no_progress, sort=args.sort, summary=(args.top, width),
                             top_report=False, page=bool(args.html))
    except RunUsageError as error:
        print(f"hloflops run: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("hloflops run: interrupted during the analysis", file=sys.stderr)
        return 130
    sys.stdout.write(format_run(result, top=args.top, sort=args.sort, width=width))
    if args.html and (result.top_page is not None or result.top_report is not None):  # (one is, whenever a
        # module was analysed and --html asked)
        Path(args.html).write_text(run_page(result, sort=args.sort), encoding="utf-8")
        print(f"hloflops run: wrote {args.html}", file=sys.stderr)
    elif args.html:
        print(f"hloflops run: no module was analysed; {args.html} not written", file=sys.stderr)
    if result.command_exit_code not in (0, None):
        print(f"hloflops run: the command {describe_exit(result.command_exit_code)}; that is our exit code",
              file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(cli_main(sys.argv[1:]))
