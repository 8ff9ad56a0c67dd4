"""Output that fits the terminal (issue 33): every line of the summary, the diff, the batch and
`run` tables fits COLUMNS when it is set, on every bundled example and a few catalogue train
steps, at 80, 100 and 160 columns; a pipe (no COLUMNS) gets the whole text, as docs/cli.md says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops import analyze
from hloflops.report.diff import diff_reports, render_diff
from hloflops.report.fit import MIN_WIDTH, fit_text, output_width, wrap_lines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.hlo"))
WIDTHS = (80, 100, 160)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "analysis"), str(ROOT)])}


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.fixture(scope="module")
def reports():
    return {path.name: analyze(path) for path in EXAMPLES}


@pytest.mark.parametrize("width", WIDTHS)
def test_every_example_summary_fits(reports, width):
    for name, report in reports.items():
        for by in ("scope", "source", "function", "module", "opcode"):
            text = report.summary(by=by, width=width, chip="h100")
            assert not _too_wide(text, width), (name, by, _too_wide(text, width))


def test_narrow_tables_keep_their_names_readable(reports):
    text = reports["seed000_remat_scan.after_optimizations.hlo"].summary(width=100)
    assert "jit(train_step)/\u2026" in text and "(jvp(StackedMLPsRematted))/while" in text  # both ends kept
    full = reports["seed000_remat_scan.after_optimizations.hlo"].summary(width=160)
    assert "jit(train_step)/transpose(jvp(StackedMLPsRematted))/while" in full  # columns dropped, not the name
    assert "make_examples.py:66" in text  # the loop's line keeps its file name
    wide = reports["seed000_remat_scan.after_optimizations.hlo"].summary(width=None)
    assert "XLA misses" in wide and "XLA misses" not in text


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_fits(reports, width):
    a = reports["seed000_listed.after_optimizations.hlo"]
    b = reports["seed000_remat_scan.after_optimizations.hlo"]
    text = render_diff(diff_reports(a, b, by="scope", depth=None), top=10, fail_above=1, width=width)
    assert not _too_wide(text, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_command_line_honours_columns(width, tmp_path):
    path = EXAMPLES[0]
    fsdp = str(ROOT / "examples" / "fsdp_train_step.after_optimizations.hlo")
    out = subprocess.run([sys.executable, "-m", "hloflops", fsdp, "--chip", "tpu-v5e"], capture_output=True,
                         text=True, env={**ENV, "COLUMNS": str(width)}, check=True).stdout
    assert not _too_wide(out, width) and path.exists()
    batch = subprocess.run([sys.executable, "-m", "hloflops", str(ROOT / "examples"), "--db", str(tmp_path / "b.db")],
                           capture_output=True, text=True, env={**ENV, "COLUMNS": str(width)}).stdout
    assert "Heaviest" in batch and not _too_wide(batch, width), _too_wide(batch, width)


def test_a_pipe_gets_the_whole_text():
    seed000 = str(ROOT / "examples" / "seed000_remat_scan.after_optimizations.hlo")
    env = {k: v for k, v in ENV.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "hloflops", seed000], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert max(map(len, out.splitlines())) > 160  # not fitted: the same bytes from any window
    assert output_width(env={}) is None  # pytest's stdout is no terminal
    assert output_width(env={"COLUMNS": "100"}) == 100 and output_width(env={"COLUMNS": "10"}) == MIN_WIDTH


def test_notes_wrap_with_their_indent():
    line = "  ! while.3: trip count unknown: " + "the loop runs until a value converges " * 4
    wrapped = wrap_lines([line], 60)
    assert len(wrapped) > 1 and all(len(w) <= 60 for w in wrapped)
    assert wrapped[0].startswith("  ! while.3") and all(w.startswith("    ") for w in wrapped[1:])
    assert " ".join(w.strip() for w in wrapped) == line.strip()
    assert fit_text("short\n", 60) == "short\n"


CATALOGUE = ["lm_scan_block", "mlp_checkpoint_in_scan", "nnx_scan_remat", "jax_transformer_checkpoint"]


@pytest.mark.parametrize("name", CATALOGUE)
def test_catalogue_train_steps_fit(name):
    from tests.programs.compile import compile_program
    from tests.programs.remat_programs import all_pairs

    pair = next((p for p in all_pairs() if p.name == name), None)
    if pair is None:
        pytest.fail(f"no catalogue pair {name}")
    compiled, _lowered, _xla = compile_program(pair.remat)
    report = analyze(compiled)
    for width in WIDTHS:
        for by in ("scope", "source", "function"):
            assert not _too_wide(report.summary(by=by, width=width), width), (name, width, by)
