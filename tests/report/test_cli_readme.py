"""The README's pasted `$ hloflops ...` sessions are real: each is rerun and must print the same
text (a block with `...` lines is an excerpt: its other lines must appear in order)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def sessions() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```\n(\$ hloflops .*?)```", text, flags=re.S):
        command, _, output = block.partition("\n")
        found.append((command[2:], output))
    return found


def test_readme_has_sessions():
    assert len(sessions()) >= 2


@pytest.mark.parametrize("command,expected", sessions(), ids=lambda v: v[:60] if isinstance(v, str) else "")
def test_readme_session_is_real_output(command, expected):
    args = shlex.split(command)[1:]
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
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


def test_readme_api_values_are_real():
    """`report.a, report.b   # 1 2` lines of the README's Python API example print those values."""
    from hloflops import analyze

    text = (ROOT / "README.md").read_text()
    block = text.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
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
