"""The shell commands of README.md and docs/*.md run from the repository root of a clean clone.

Which text is a command:
- every line of a ```bash / ```sh block (a trailing `\\` joins the next line; `#` lines are comments);
- every `$ `-prefixed line of a ```console block or of a bare ``` block (the lines after it are its
  output, which tests/report/test_cli_readme.py compares for `$ hloflops ...`).
```text blocks are synopses and placeholders (`hloflops FILE`), never run.

Which commands are not run here, by this rule and nothing else (`skip_reason`):
- those that install (`pip`) or run the test suite (`pytest`): they need the network or are the suite;
- those that need jax: `hloflops run`, `--compare-xla`, `XLA_FLAGS=...` (a jax program dumping) and
  `python3 SCRIPT.py` where the script imports jax, flax or optax.
A bash block runs line by line in order, and is skipped whole when one of its lines is (a later
line may read what an earlier one wrote, e.g. a dump directory).

Every other command runs (bash, repo root, a time limit) with `hloflops` and `python3` on PATH
meaning this interpreter's `-m hloflops` and `sys.executable`, so the code under test is this
checkout's; it must exit 0, or N where the line ends with `# exit N`. A command must not leave
files in the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
JAX_IMPORT = re.compile(r"^\s*(import|from)\s+(jax|jaxlib|flax|optax)\b", flags=re.M)
EXIT_COMMENT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")
README_SIZE_LIMIT = 15_500


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    commands: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _bash_commands(body: str) -> list[str]:
    commands, pending = [], ""
    for line in body.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


def blocks(pages: list[Path] = PAGES) -> list[Block]:
    found = []
    for page in pages:
        text = page.read_text()
        for match in FENCE.finditer(text):
            language, body = match.group(1), match.group(2)
            if language in ("bash", "sh"):
                commands = _bash_commands(body)
            elif language in ("console", ""):
                commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
            else:
                continue
            if commands:
                line = text.count("\n", 0, match.start()) + 1
                name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
                found.append(Block(name, line, tuple(commands)))
    return found


def _script_imports_jax(command: str) -> bool:
    for word in command.split():
        if word.endswith(".py") and (ROOT / word).is_file():
            if JAX_IMPORT.search((ROOT / word).read_text()):
                return True
    return False


def skip_reason(command: str) -> str | None:
    """Why `command` is not run here (the rule in the module docstring), or None."""
    if re.search(r"\bpip\b", command):
        return "installs packages (network)"
    if re.search(r"\bpytest\b", command):
        return "runs the test suite itself"
    if re.search(r"\bhloflops\s+run\b", command) or "--compare-xla" in command or "XLA_FLAGS=" in command:
        return "needs jax"
    if _script_imports_jax(command):
        return "runs a script that imports jax"
    return None


def expected_exit(command: str) -> int:
    match = EXIT_COMMENT.search(command)
    return int(match.group(1)) if match else 0


def _tool_dir(tmp_path: Path) -> Path:
    """`hloflops` and `python3` for the commands: this interpreter, so this checkout's code runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, line in (("hloflops", f'exec "{sys.executable}" -m hloflops "$@"'),
                       ("python3", f'exec "{sys.executable}" "$@"')):
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{line}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def _repo_state() -> str | None:
    """Untracked and modified files of the checkout, where it is a git checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


ALL_BLOCKS = blocks()
RUN_BLOCKS = [b for b in ALL_BLOCKS if not any(skip_reason(c) for c in b.commands)]


def test_the_pages_hold_commands_and_most_run():
    commands = [c for b in ALL_BLOCKS for c in b.commands]
    run = [c for b in RUN_BLOCKS for c in b.commands]
    readme_run = [c for b in RUN_BLOCKS if b.page == "README.md" for c in b.commands]
    assert len(run) >= 20, run
    assert len(readme_run) >= 6, readme_run
    assert len(run) > len(commands) // 2, "most documented commands need neither jax nor the network"


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=lambda b: b.id)
def test_documented_commands_run_from_the_repo_root(block: Block, tmp_path: Path):
    env = dict(os.environ, PATH=f"{_tool_dir(tmp_path)}{os.pathsep}{os.environ.get('PATH', '')}",
               XDG_CACHE_HOME=str(tmp_path / "cache"), COLUMNS="200", HLOFLOPS_TRACEBACK="")
    before = _repo_state()
    for command in block.commands:
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == expected_exit(command), (
            f"{block.id}: `{command}` exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    assert _repo_state() == before, f"{block.id} left files in the repository"


@pytest.mark.parametrize("command,reason", [
    ("python3 -m pip install -e . && hloflops x.hlo", "installs packages (network)"),
    ("python3 -m pip install -e '.[test]' && python3 -m pytest -q", "installs packages (network)"),
    ("hloflops run -- python3 examples/train_mlp.py", "needs jax"),
    ("XLA_FLAGS=--xla_dump_to=/tmp/dump python3 examples/train_mlp.py", "needs jax"),
    ("python3 examples/make_sharded_example.py", "runs a script that imports jax"),
    ("hloflops examples/fori_loop.after_optimizations.hlo --compare-xla", "needs jax"),
    ("hloflops examples/fori_loop.after_optimizations.hlo --json", None),
    ("python3 benchmarks/startup_time.py --runs 1", None),
])
def test_skip_rule(command, reason):
    assert skip_reason(command) == reason


def test_extraction_of_blocks(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("text\n```bash\n# a comment\nhloflops a.hlo \\\n  --json\nhloflops b.hlo  # exit 2\n```\n"
                    "```\n$ hloflops c.hlo\noutput\n```\n```text\nhloflops FILE\n```\n```python\nx = 1\n```\n")
    page_blocks = blocks([page])
    assert [b.commands for b in page_blocks] == [("hloflops a.hlo    --json", "hloflops b.hlo  # exit 2"),
                                                 ("hloflops c.hlo",)]
    assert expected_exit(page_blocks[0].commands[1]) == 2


def test_readme_is_at_most_15_kb():
    assert len((ROOT / "README.md").read_bytes()) <= README_SIZE_LIMIT


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = "python3 -m pip install -e '.[test]' && python3 -m pytest -q"
    assert test_command in readme.split("## Quick start", 1)[1].split("##", 1)[0]
    assert test_command in [line.strip() for line in ci.splitlines()]  # a line of its own (the oldest-jax job follows)


def test_links_between_the_pages_resolve():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if not target.startswith(("http://", "https://")) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken
