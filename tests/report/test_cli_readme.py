"""The pasted `$ hloflops ...` sessions of README.md and docs/*.md are real: each is rerun and must
print the same text (a block with `...` lines is an excerpt: its other lines must appear in order).
`hloflops run` sessions run too (the suite has jax); tests/report/test_readme_commands.py runs the
other documented commands."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def sessions(pages: list[Path] = PAGES) -> list[tuple[str, str]]:
    found = []
    for page in pages:
        for block in re.findall(r"^```(?:console)?\n(\$ hloflops .*?)^```", page.read_text(), flags=re.S | re.M):
            command, _, output = block.partition("\n")
            found.append((command[2:], output))
    return found


def test_readme_has_sessions():
    assert len(sessions([ROOT / "README.md"])) >= 4
    assert len(sessions()) >= 6


@pytest.mark.parametrize("command,expected", sessions(), ids=lambda v: v[:60] if isinstance(v, str) else "")
def test_readme_session_is_real_output(command, expected):
    args = shlex.split(command)[1:]
    # the README shows what a pipe prints: no COLUMNS, so no table is elided to a terminal's width
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    if "\n...\n" not in "\n" + expected:
        assert proc.stdout == expected
        return
    lines = proc.stdout.splitlines()
    position = 0
    for line in expected.splitlines():
        if line == "...":
            continue
        assert line in lines[position:], f"README line not in the output (in order): {line!r}\n{proc.stdout}"
        position = lines.index(line, position) + 1


@pytest.mark.parametrize("page,heading", [("README.md", "## Python API"), ("docs/api.md", "# Python API")])
def test_readme_api_values_are_real(page, heading):
    """`report.a, report.b   # 1 2` lines of the Python API examples print those values."""
    from hloflops import analyze

    text = (ROOT / page).read_text()
    block = text.split(heading, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    path = re.search(r'analyze\("([^"]+)"\)', block).group(1)
    report = analyze(ROOT / path)
    checked = 0
    attribute = r"report\.[\w.\[\]\"]+"
    for expression, comment in re.findall(rf"^({attribute}(?:, {attribute})+)\s+# (.+)$", block, flags=re.M):
        value = eval(expression, {"report": report})  # noqa: S307 - the README's own expression
        got = " ".join(map(str, value))
        assert got == comment.strip(), expression
        checked += 1
    assert checked >= 2
