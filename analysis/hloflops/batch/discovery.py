"""Finding HLO modules on disk for batch analysis.

Two kinds of input are recognised, recursively under every directory given:

- XLA dump files (`XLA_FLAGS=--xla_dump_to=DIR`). XLA names them
  `[PREFIX.]module_NNNN.NAME.STAGE.txt`, where STAGE is `before_optimizations`, the
  after-optimizations name (`after_optimizations`, or with a platform prefix such as
  `cpu_after_optimizations`, `sm_9.0_gpu_after_optimizations`, `gfx90a_gpu_after_optimizations`)
  or a between-passes name (`0007.PIPELINE.after_PASS.before_PASS`). The same dump holds many
  side files with the same prefix (`...-buffer-assignment.txt`, `...-memory-usage-report.txt`,
  `.pb`, `.dot`, `.ll`, `.o`, `debug_options`, `thunk_sequence.txt`, ...): they are not HLO
  modules and are ignored. By default one after-optimizations text per module is picked.
- Plain HLO text files: `*.hlo` and `*.txt`, optionally gzip-compressed (`*.hlo.gz`, `*.txt.gz`).

Paths named explicitly (not found by walking a directory) are always taken, whatever their name.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

AFTER_OPTIMIZATIONS = "after_optimizations"
BEFORE_OPTIMIZATIONS = "before_optimizations"
ALL_STAGES = "all"

PLAIN_SUFFIXES = (".hlo", ".txt")
GZIP_SUFFIX = ".gz"

# `[PREFIX.]module_NNNN.REST` where REST is `NAME.STAGE`; XLA pads the id to at least 4 digits.
_DUMP_NAME = re.compile(r"^(?:(?P<prefix>.+?)\.)?module_(?P<id>\d{4,})\.(?P<rest>.+)$")
# The module name is matched lazily so that a name containing dots still leaves a stage that
# has none (or, for a GPU compute capability like `sm_8.0`, exactly the dot XLA puts there).
_STAGE = re.compile(
    r"^(?P<name>.+?)\.(?P<stage>"
    r"before_optimizations"
    r"|(?:sm_\d+\.\d+[a-z]?_gpu_|[A-Za-z0-9_]*_)?after_optimizations"
    r"|\d{4}\.[^.]+\.after_[^.]+\.before_[^.]+"
    r")$"
)


@dataclass(frozen=True, slots=True)
class DumpName:
    """What an XLA dump file name says about the module text inside."""

    prefix: str  # "" unless XLA was told to prefix names (e.g. a timestamp)
    module_id: int
    module_name: str
    stage: str  # e.g. "cpu_after_optimizations"


@dataclass(frozen=True, slots=True)
class ModuleFile:
    """One file to analyse."""

    path: Path
    size: int  # bytes on disk (compressed size for gzip files); 0 where stat failed
    compressed: bool
    stage: str | None  # from the dump name; None for plain files
    dump: DumpName | None = None


@dataclass(frozen=True, slots=True)
class Discovery:
    files: tuple[ModuleFile, ...]
    ignored: int  # dump side files and files of other stages
    missing_stage: tuple[str, ...]  # dump modules ("DIR/module_NNNN.NAME") with no text of the asked stage
    problems: tuple[tuple[str, str], ...]  # (path, why) for paths that do not exist or directories not listed

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def is_gzip_name(name: str) -> bool:
    return name.endswith(GZIP_SUFFIX)


def parse_dump_name(filename: str) -> DumpName | None:
    """The dump naming of a module text file, or None (not a dump module text: a side file or a plain file)."""
    base = filename[: -len(GZIP_SUFFIX)] if is_gzip_name(filename) else filename
    if not base.endswith(".txt"):
        return None
    match = _DUMP_NAME.match(base[: -len(".txt")])
    if match is None:
        return None
    stage_match = _STAGE.match(match["rest"])
    if stage_match is None:
        return None
    return DumpName(
        prefix=match["prefix"] or "",
        module_id=int(match["id"]),
        module_name=stage_match["name"],
        stage=stage_match["stage"],
    )


def looks_like_dump_file(filename: str) -> bool:
    """True for any file XLA's dumper writes for a module (module text or side file)."""
    return _DUMP_NAME.match(filename) is not None


def stage_matches(stage: str, selector: str) -> bool:
    """Whether a dump stage is what `--stage selector` asks for.

    `after_optimizations` matches every platform's after-optimizations name; `all` matches every
    stage; anything else is an exact stage name or an fnmatch pattern (`*after_algsimp*`).
    """
    if selector == ALL_STAGES:
        return True
    if selector == AFTER_OPTIMIZATIONS:
        return stage == AFTER_OPTIMIZATIONS or stage.endswith("_" + AFTER_OPTIMIZATIONS)
    return stage == selector or fnmatch.fnmatchcase(stage, selector)


def _one_per_module(selector: str) -> bool:
    # The two named stages exist once per compilation; a pattern or `all` asks for every match.
    return selector in (AFTER_OPTIMIZATIONS, BEFORE_OPTIMIZATIONS)


def _is_plain_module_name(filename: str) -> bool:
    base = filename[: -len(GZIP_SUFFIX)] if is_gzip_name(filename) else filename
    return base.endswith(PLAIN_SUFFIXES)


def _stat_size(path: Path) -> int:
    try:
        st = path.stat()
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def discover(paths: Iterable[str | os.PathLike[str]], stage: str = AFTER_OPTIMIZATIONS) -> Discovery:
    """Every module file under `paths` (files or directories), sorted by path, without duplicates."""
    chosen: dict[Path, ModuleFile] = {}
    ignored = 0
    problems: list[tuple[str, str]] = []
    # (directory, prefix, id, name) -> candidate dump files of the selected stage
    dump_candidates: dict[tuple[str, str, int, str], list[ModuleFile]] = {}
    dump_modules_seen: set[tuple[str, str, int, str]] = set()

    def consider(path: Path, explicit: bool) -> None:
        nonlocal ignored
        # One key per file however it was named; not resolved, so a symlink keeps its own name.
        path = Path(os.path.abspath(path))
        name = path.name
        dump = parse_dump_name(name)
        if dump is not None:
            key = (str(path.parent), dump.prefix, dump.module_id, dump.module_name)
            if not explicit:
                dump_modules_seen.add(key)
            if stage_matches(dump.stage, stage) or explicit:
                mf = ModuleFile(path, _stat_size(path), is_gzip_name(name), dump.stage, dump)
                if explicit:
                    chosen[path] = mf
                else:
                    dump_candidates.setdefault(key, []).append(mf)
            else:
                ignored += 1
            return
        # XLA writes its side files as `.txt` (never `.hlo`), so only a `.txt` with dump naming is one.
        side_file = looks_like_dump_file(name) and (name.endswith(".txt") or name.endswith(".txt.gz"))
        if explicit or (_is_plain_module_name(name) and not side_file):
            chosen[path] = ModuleFile(path, _stat_size(path), is_gzip_name(name), None, None)
        else:
            ignored += 1

    for raw in paths:
        root = Path(raw)
        if not os.path.lexists(root):
            problems.append((str(root), "no such file or directory"))
            continue
        if not root.is_dir():
            consider(root, explicit=True)
            continue

        def on_walk_error(err: OSError) -> None:
            problems.append((str(err.filename), f"cannot list directory: {err.strerror}"))

        for dirpath, dirnames, filenames in os.walk(root, onerror=on_walk_error):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for filename in sorted(filenames):
                if not filename.startswith("."):
                    consider(Path(dirpath) / filename, explicit=False)

    for key, candidates in dump_candidates.items():
        if _one_per_module(stage):
            # Some platforms dump both `after_optimizations` and `cpu_after_optimizations` for one
            # compilation; they are the same module. Prefer the exact stage name, then by name.
            candidates.sort(key=lambda mf: (mf.stage != stage, mf.path.name))
            candidates = candidates[:1]
            ignored += len(dump_candidates[key]) - 1
        for mf in candidates:
            chosen[mf.path] = mf
    missing = sorted(
        f"{directory}/{prefix + '.' if prefix else ''}module_{module_id:04d}.{name}"
        for (directory, prefix, module_id, name) in dump_modules_seen - dump_candidates.keys()
    )
    if stage == ALL_STAGES or not _one_per_module(stage):
        missing = []  # a pattern need not match every module
    files = tuple(sorted(chosen.values(), key=lambda mf: str(mf.path)))
    return Discovery(files=files, ignored=ignored, missing_stage=tuple(missing), problems=tuple(problems))
