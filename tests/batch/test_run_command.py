"""`hloflops run -- python SCRIPT`: real scripts (tests/support/run_scripts/ and the bundled
examples/train_mlp.py) run under it, each in a few seconds on a CPU."""

from __future__ import annotations

import os
import signal
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops.batch.db import VOLATILE_COLUMNS
from hloflops.batch.run_command import merge_xla_flags, split_command
from tests.conftest import SOURCE_PATH

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "support" / "run_scripts"
TRAIN_MLP = [str(ROOT / "examples" / "train_mlp.py"), "--steps", "2", "--layers", "4", "--batch", "128"]


def hloflops(*args: str, env: dict[str, str] | None = None, new_session: bool = False,
             cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": SOURCE_PATH, **(env or {})}
    return subprocess.run([sys.executable, "-m", "hloflops.cli", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=180, start_new_session=new_session,
                          preexec_fn=_as_in_a_terminal if new_session else None)


def _as_in_a_terminal() -> None:
    # A shell starts a background job (`cmd &`, nohup) with SIGINT ignored, and children inherit
    # that: the Ctrl-C test would then test nothing. In a terminal's session SIGINT is live.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(*options: str, script: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return hloflops("run", "--no-progress", "-j", "1", *options, "--", sys.executable, *script, **kw)


def table(stdout: str, title: str) -> list[list[str]]:
    """The rows of the summary table whose title starts with `title`, split on whitespace."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 2
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return [line.split() for line in lines[start:end]]


def top_module(stdout: str) -> str:
    return re.search(r"^Top module: (\S+) ", stdout, flags=re.M).group(1)


def db_rows(path: Path) -> dict[str, dict]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return {r["path"]: {k: r[k] for k in r.keys() if k not in VOLATILE_COLUMNS}
                for r in conn.execute("SELECT * FROM modules")}


def test_flax_training_loop_kept_dump_and_database(tmp_path: Path) -> None:
    """The train step (a scan over remat'd blocks) is the top module; --db rows equal `hloflops DIR`
    over the kept dump; --html writes the modules table and the top module's chart."""
    dump, db, page = tmp_path / "dump", tmp_path / "run.sqlite", tmp_path / "run.html"
    proc = run("--keep", str(dump), "--db", str(db), "--html", str(page), script=TRAIN_MLP)
    assert proc.returncode == 0, proc.stderr
    assert "step 1: loss" in proc.stdout  # the script's own output comes through
    assert "exited with code 0" in proc.stdout and f"kept in {dump}" in proc.stdout
    heaviest = table(proc.stdout, "Heaviest modules first")
    assert heaviest[0][-2] == "jit_train_step" and top_module(proc.stdout) == "jit_train_step"
    flops = [int(r[0].replace(",", "")) for r in heaviest]
    assert flops == sorted(flops, reverse=True)
    worst = table(proc.stdout, "Worst XLA undercount first")
    ratios = [float(r[0][:-1]) for r in worst if r[0] != "-"]
    assert ratios == sorted(ratios, reverse=True)
    # the top module's single-module summary: the two 4-trip loops of nn.scan and the remat
    assert re.search(r"^  while\.\d+ +4 +backend_config", proc.stdout, flags=re.M)
    remat = int(re.search(r"remat flops ([\d,]+)", proc.stdout).group(1).replace(",", ""))
    assert remat > 0
    assert page.read_text().count("jit_train_step") >= 2 and 'id="chart"' in page.read_text()

    # the database equals a batch over the kept dump
    again = tmp_path / "again.sqlite"
    batch = hloflops(str(dump), "--db", str(again), "--no-progress", "-j", "1")
    assert batch.returncode == 0, batch.stderr
    first, second = db_rows(db), db_rows(again)
    assert first and first == second
    assert any(r["module_name"] == "jit_train_step" and r["remat_flops"] == remat for r in first.values())

    # batch: --module picks one module by name, --sort name orders by name
    one = hloflops(str(dump), "--db", str(again), "--no-progress", "--module", "jit_train_*", "--sort", "name")
    assert one.returncode == 0, one.stderr
    rows = table(one.stdout, "Modules by name")
    assert [r[-2] for r in rows] == ["jit_train_step"] and "others left out" in one.stdout
    named = hloflops(str(dump), "--db", str(again), "--no-progress", "--sort", "name", "--top", "100")
    names = [r[-2] for r in table(named.stdout, "Modules by name")]
    # one row per program (a name and fingerprint), its files folded into 'compiled'
    programs, files = map(int, re.search(r"^Modules by name, top \d+ of (\d+) programs in (\d+) files",
                                         named.stdout, flags=re.M).groups())
    assert names == sorted(names) and len(names) == programs < files == len(first)


def test_init_phase_two_jitted_functions_and_user_xla_flags(tmp_path: Path) -> None:
    """The train step outweighs the init phase; a function compiled for two shapes is one program
    compiled twice (one row, compiled 2);
    the user's XLA_FLAGS still apply (2 host devices) and their --xla_dump_to is replaced."""
    elsewhere = tmp_path / "users_dump"
    flags = f"--xla_force_host_platform_device_count=2 --xla_dump_to={elsewhere}"
    proc = run(script=[str(SCRIPTS / "two_functions.py")], env={"XLA_FLAGS": flags})
    assert proc.returncode == 0, proc.stderr
    assert "devices 2" in proc.stdout and not elsewhere.exists()
    assert f"--xla_dump_to={elsewhere} replaced" in proc.stderr
    assert top_module(proc.stdout) == "jit_train_step"
    heaviest = table(proc.stdout, "Heaviest modules first")
    predict = [r for r in heaviest if r[-1] == "jit_predict"]
    assert len(predict) == 1 and predict[0][3] == "2"  # one program (one row), compiled for two shapes
    train = next(r for r in heaviest if r[-1] == "jit_train_step")
    assert train[4] == "1" and float(train[1][:-1]) > 1  # one loop (the scan), undercounted by XLA


def test_worker_process_modules_are_all_found() -> None:
    proc = run(script=[str(SCRIPTS / "forks.py")])
    assert proc.returncode == 0, proc.stderr
    assert "worker exit code 0" in proc.stdout
    heaviest = table(proc.stdout, "Heaviest modules first")
    names = [r[-1] for r in heaviest]
    assert "jit_worker_only" in names  # compiled only in the spawned process
    step = [r for r in heaviest if r[-1] == "jit_step"]
    assert len(step) == 1 and step[0][3] == "2"  # one program: the parent's and the worker's file, not overwritten


def test_nonzero_exit_code_is_reported_and_returned() -> None:
    proc = run(script=[str(SCRIPTS / "exits_nonzero.py")])
    assert proc.returncode == 3
    assert "exited with code 3" in proc.stdout and "that is our exit code" in proc.stderr
    assert top_module(proc.stdout) == "jit_train_step"


def test_ctrl_c_half_way_still_analyses_what_was_dumped() -> None:
    # The script sends SIGINT to its process group, as a terminal's Ctrl-C does: hloflops run
    # (in the same group, its own session here) must survive it and analyse the dump.
    proc = run(script=[str(SCRIPTS / "interrupted.py")], new_session=True)
    assert proc.returncode == 130, proc.stderr
    assert "was killed by SIGINT" in proc.stdout
    assert top_module(proc.stdout) == "jit_train_step"
    assert "never_compiled" not in proc.stdout


def test_command_problems_are_one_line() -> None:
    missing = hloflops("run", "--no-progress", "--", "no-such-command-xyz")
    assert missing.returncode == 127 and "cannot run no-such-command-xyz" in missing.stderr
    assert hloflops("run", "--no-progress").returncode == 2
    assert hloflops("run", "--sort", "bogus", "--", "true").returncode == 2


def test_keep_refuses_a_directory_with_files(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    proc = hloflops("run", "--keep", str(tmp_path), "--", "true")
    assert proc.returncode == 2 and "not an empty directory" in proc.stderr


def test_xla_flags_merge_keeps_the_users() -> None:
    flags, note = merge_xla_flags("--xla_cpu_enable_fast_math=false  --xla_dump_to=/old --xla_dump_hlo_pass_re=.*",
                                  "/new")
    assert flags.split() == ["--xla_cpu_enable_fast_math=false", "--xla_dump_hlo_pass_re=.*", "--xla_dump_to=/new",
                             "--xla_dump_hlo_as_text", "--xla_dump_include_timestamp"]
    assert "--xla_dump_to=/old" in note
    assert merge_xla_flags("", "/d") == ("--xla_dump_to=/d --xla_dump_hlo_as_text --xla_dump_include_timestamp", "")


def test_split_command() -> None:
    assert split_command(["--top", "3", "--", "python", "-u", "x.py"]) == (["--top", "3"], ["python", "-u", "x.py"])
    assert split_command(["--keep", "d", "python", "x.py", "--lr", "1"]) == (["--keep", "d"],
                                                                             ["python", "x.py", "--lr", "1"])


@pytest.mark.parametrize("sort", ["flops", "ratio", "name", "time"])
def test_sort_orders(sort: str) -> None:
    from hloflops.batch.summary import sort_rows

    rows = [
        {"path": "a", "module_name": "b", "flops": 10, "ratio": 1.0, "seconds": 0.3},
        {"path": "b", "module_name": "a", "flops": 30, "ratio": None, "seconds": 0.1},
        {"path": "c", "module_name": "c", "flops": 20, "ratio": 5.0, "seconds": 0.2},
    ]
    expected = {"flops": ["b", "c", "a"], "ratio": ["c", "a", "b"], "name": ["b", "a", "c"], "time": ["a", "c", "b"]}
    assert [r["path"] for r in sort_rows(rows, sort)] == expected[sort]


# A command that only puts modules where XLA would dump them (the directory its XLA_FLAGS name).
_COPY_INTO_DUMP = r"""
import os, shutil, sys
dump = next(f.split("=", 1)[1] for f in os.environ["XLA_FLAGS"].split() if f.startswith("--xla_dump_to="))
for i, path in enumerate(sys.argv[1:]):
    shutil.copy(path, os.path.join(dump, f"module_{i:04d}.jit_m{i}.after_optimizations.txt"))
"""


@pytest.mark.parametrize("keep", [False, True])
def test_the_top_module_is_analysed_once_its_summary_comes_from_the_batch_worker(
        tmp_path: Path, examples_dir: Path, keep: bool) -> None:
    """`hloflops run` prints the top module's summary as the batch worker rendered it: the parent builds no
    Report (before: it analysed the top module a second time), and what it prints is unchanged."""
    from hloflops.batch.run_command import format_run, run_command

    modules = [str(examples_dir / name) for name in ("fori_loop.after_optimizations.hlo",
                                                     "fsdp_train_step.after_optimizations.hlo")]
    command = [sys.executable, "-c", _COPY_INTO_DUMP, *modules]
    texts = []
    for once in (True, False):
        where = str(tmp_path / ("dump_a" if once else "dump_b")) if keep else None  # paths of one length
        result = run_command(command, keep=where, processes=1, progress=False,
                             **({"summary": (5, 100), "top_report": False} if once else {}))
        assert result.exit_code == 0 and len(result.summary.rows) == 2
        assert (result.top_report is None) == once and (result.top_summary is not None) == once
        text = format_run(result, top=5, width=100)
        # the time may wrap onto the next line, and a longer time moves the wrap: compare words
        words = " ".join(text.replace("dump_b", "dump_a").split())
        texts.append(re.sub(r"after [\d.]+ s", "after X s", words))
    assert "Top module: " in texts[0] and "exact (loop-aware)" in texts[0]
    assert texts[0] == texts[1]


@pytest.mark.parametrize("keep", [False, True])
def test_the_html_page_of_the_top_module_comes_from_the_batch_worker(
        tmp_path: Path, examples_dir: Path, keep: bool) -> None:
    """`hloflops run --html`: the batch worker renders the top module's page too, so the parent builds no
    Report for it (before: it analysed the top module again for the page); the page is unchanged."""
    from hloflops.batch.run_command import run_command, run_page

    modules = [str(examples_dir / name) for name in ("fori_loop.after_optimizations.hlo",
                                                     "fsdp_train_step.after_optimizations.hlo")]
    command = [sys.executable, "-c", _COPY_INTO_DUMP, *modules]
    pages = []
    for once in (True, False):
        where = str(tmp_path / ("dump_a" if once else "dump_b")) if keep else None  # paths of one length
        result = run_command(command, keep=where, processes=1, progress=False, summary=(5, 100),
                             top_report=not once, page=once)
        assert result.exit_code == 0 and len(result.summary.rows) == 2
        assert (result.top_report is None) == once and (result.top_page is not None) == once
        pages.append(run_page(result).replace("dump_b", "dump_a"))
    assert "<h2>Top module: jit_train_step</h2>" in pages[0] and "<!--hloflops" not in pages[0]
    assert (str(tmp_path / "dump_a") in pages[0]) == keep
    assert pages[0] == pages[1]
