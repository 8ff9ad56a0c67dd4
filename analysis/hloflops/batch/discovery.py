"""Finding HLO modules on disk for batch analysis.

Two kinds of input are recognised, recursively under every directory given:

- XLA dump files (`XLA_FLAGS=--xla_dump_to=DIR`). XLA names them
  `[PREFIX.]module_NNNN[.NAME][.cl_NNNN].STAGE.txt` (text) or `....STAGE.hlo.pb[.gz]` (an HloProto,
  with `--xla_dump_hlo_as_proto`): NAME is left out when the file name would pass 255 characters
  (the module name is then read from the file's `HloModule` line), `cl_NNNN` is the changelist
  some builds (libtpu) stamp, and STAGE is `before_optimizations`, an after-optimizations name
  (`after_optimizations`, or with a platform prefix such as `cpu_after_optimizations`,
  `sm_9.0_gpu_after_optimizations`, `gfx90a_gpu_after_optimizations`; libtpu adds
  `after_optimizations_before_buffer_assignment`, `after_optimizations_after_buffer_assignment`
  and `after_codegen`) or a between-passes name (`0007.PIPELINE.after_PASS.before_PASS`, and
  `0007.PASS.STEP` during a pass). The same dump holds many side files with the same prefix
  (`...-buffer-assignment.txt`, `...-memory-usage-report.txt`, `execution_options.txt`, `.dot`,
  `.ll`, `.o`, `debug_options`, ...): they are not HLO modules and are ignored. By default one
  after-optimizations file per module is picked; text and proto of one module are one module
  (the text is read).
- Plain HLO files: `*.hlo` and `*.txt`, optionally gzip-compressed (`*.hlo.gz`, `*.txt.gz`), and
  HLO protos: `*.hlo.pb`, `*.hlo.pb.gz`, XProf's `*.hlo_proto.pb`. A `.txt` (or gzip of one)
  that holds no HLO, by its first lines (notes, logs, a README), is skipped with the reason,
  not analysed; so is a proto that is no HLO proto.

Paths named explicitly (not found by walking a directory) are always taken, whatever their name.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

AFTER_OPTIMIZATIONS = "after_optimizations"
BEFORE_OPTIMIZATIONS = "before_optimizations"
ALL_STAGES = "all"

PLAIN_SUFFIXES = (".hlo", ".txt")
PROTO_SUFFIXES = (".hlo.pb", ".hlo_proto.pb")
GZIP_SUFFIX = ".gz"
XPLANE_SUFFIX = ".xplane.pb"  # jax.profiler's `plugins/profile/RUN/HOST.xplane.pb`: every program that ran
TEXT, PROTO = "text", "proto"

# `[PREFIX.]module_NNNN.REST` where REST is `NAME.STAGE`; XLA pads the id to at least 4 digits.
_DUMP_NAME = re.compile(r"^(?:(?P<prefix>.+?)\.)?module_(?P<id>\d{4,})\.(?P<rest>.+)$")
# The module name is matched lazily so that a name containing dots still leaves a stage that
# has none (or, for a GPU compute capability like `sm_8.0`, exactly the dot XLA puts there).
# The name may be absent (XLA drops it from names that would pass 255 characters); a changelist
# stamp `cl_NNNN` (libtpu's builds) sits between it and the stage and is neither.
_STAGE = re.compile(
    r"^(?:(?P<name>.+?)\.)??(?:cl_(?P<cl>\d+)\.)?(?P<stage>"
    r"before_optimizations"
    r"|(?:sm_\d+\.\d+[a-z]?_gpu_|[A-Za-z0-9_]*_)?after_optimizations"
    r"(?:_before_buffer_assignment|_after_buffer_assignment)?"
    r"|after_codegen"
    r"|\d{4}\.[^.]+\.after_[^.]+\.before_[^.]+"
    r"|\d{4}\.[^.]+\.[^.]+"
    r")$"
)


@dataclass(frozen=True, slots=True)
class DumpName:
    """What an XLA dump file name says about the module text inside."""

    prefix: str  # "" unless XLA was told to prefix names (e.g. a timestamp)
    module_id: int
    module_name: str  # "" where XLA left it out of the file name (read from the file when needed)
    stage: str  # e.g. "cpu_after_optimizations"
    changelist: str = ""  # the `cl_NNNN` stamp's number, if any
    format: str = TEXT  # TEXT (`.txt`) or PROTO (`.hlo.pb`, an HloProto)


@dataclass(frozen=True, slots=True)
class ModuleFile:
    """One file to analyse."""

    path: Path
    size: int  # bytes on disk (compressed size for gzip files); 0 where stat failed
    compressed: bool
    stage: str | None  # from the dump name; None for plain files
    dump: DumpName | None = None
    program: str | None = None  # one program of a profile's xplane.pb (`jit_f(6)`); None: the file's one module


@dataclass(frozen=True, slots=True)
class Discovery:
    files: tuple[ModuleFile, ...]
    ignored: int  # dump side files and files of other stages
    missing_stage: tuple[str, ...]  # dump modules ("DIR/module_NNNN.NAME") with no text of the asked stage
    problems: tuple[tuple[str, str], ...]  # (path, why) for paths that do not exist or directories not listed
    skipped: tuple[tuple[str, str], ...] = ()  # (path, why) for files that hold no HLO (notes, logs)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def is_gzip_name(name: str) -> bool:
    return name.endswith(GZIP_SUFFIX)


def parse_dump_name(filename: str) -> DumpName | None:
    """The dump naming of a module file (text or proto), or None (a side file or a plain file)."""
    base = filename[: -len(GZIP_SUFFIX)] if is_gzip_name(filename) else filename
    if base.endswith(".txt"):
        stem, format_ = base[: -len(".txt")], TEXT
    elif base.endswith(".hlo.pb"):
        stem, format_ = base[: -len(".hlo.pb")], PROTO
    else:
        return None
    match = _DUMP_NAME.match(stem)
    if match is None:
        return None
    stage_match = _STAGE.match(match["rest"])
    if stage_match is None:
        return None
    return DumpName(
        prefix=match["prefix"] or "",
        module_id=int(match["id"]),
        module_name=stage_match["name"] or "",
        stage=stage_match["stage"],
        changelist=stage_match["cl"] or "",
        format=format_,
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
    return base.endswith(PLAIN_SUFFIXES) or base.endswith(PROTO_SUFFIXES)


def _claims_hlo(filename: str) -> bool:
    """A name that says HLO (`.hlo`, `.hlo.pb`, ...): taken, and an error if it is not; a `.txt` says
    nothing, so its content decides."""
    base = filename[: -len(GZIP_SUFFIX)] if is_gzip_name(filename) else filename
    return base.endswith(".hlo") or base.endswith(PROTO_SUFFIXES)


def why_not_hlo(path: Path) -> str | None:
    """None when the file's head holds HLO in a form hloflops reads; else what it holds instead.
    A file that cannot be read is left to the reader, which reports it."""
    from hloparse.formats import read_head, sniff

    try:
        found = sniff(read_head(str(path)), path.name)
    except OSError:
        return None
    return None if found.is_module else f"not HLO: {found.describe()}"


def module_name_in_file(path: Path) -> str:
    """The `HloModule` name of a text file (a dump name without the module name), "" if unreadable."""
    from hloparse.formats import read_head
    from hloparse.gzipped import GZIP_MAGIC

    try:
        head = read_head(str(path), 4096)
        if head[:2] == GZIP_MAGIC:
            import zlib

            head = zlib.decompressobj(wbits=31).decompress(head, 4096)
    except (OSError, Exception):  # noqa: BLE001 - a name is a convenience; the reader reports errors
        return ""
    m = re.match(rb"\s*HloModule\s+([^\s,]+)", head)
    return m.group(1).decode("utf-8", "replace").rstrip(":") if m else ""


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
    skipped: list[tuple[str, str]] = []
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
            if not dump.module_name:  # XLA left the name out of a long file name: the file has it
                dump = replace(dump, module_name=_name_in_file(path, dump.format))
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
        # XLA writes its side files as `.txt` and `.pb` (never `.hlo`), so only those with dump naming are.
        base = name[: -len(GZIP_SUFFIX)] if is_gzip_name(name) else name
        side_file = looks_like_dump_file(name) and base.endswith((".txt", *PROTO_SUFFIXES))
        if base.endswith(XPLANE_SUFFIX):
            _add_profile_programs(path, chosen, skipped)
        elif explicit:
            chosen[path] = ModuleFile(path, _stat_size(path), is_gzip_name(name), None, None)
        elif _is_plain_module_name(name) and not side_file:
            reason = None if _claims_hlo(name) else why_not_hlo(path)
            if reason is not None:
                skipped.append((str(path), reason))
                return
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
            # compilation; they are the same module, and so are its text and its proto. Prefer the
            # exact stage name, then the text (readable without jax), then by name.
            candidates.sort(key=lambda mf: (mf.stage != stage, mf.dump.format != TEXT, mf.path.name))
            candidates = candidates[:1]
            ignored += len(dump_candidates[key]) - 1
        else:
            # Every matching stage, but each stage once: its text, where both were dumped.
            by_stage: dict[str, ModuleFile] = {}
            for mf in sorted(candidates, key=lambda mf: (mf.dump.format != TEXT, mf.path.name)):
                by_stage.setdefault(mf.stage, mf)
            ignored += len(candidates) - len(by_stage)
            candidates = list(by_stage.values())
        for mf in candidates:
            chosen[mf.path] = mf
    missing = sorted(
        f"{directory}/{prefix + '.' if prefix else ''}module_{module_id:04d}.{name}"
        for (directory, prefix, module_id, name) in dump_modules_seen - dump_candidates.keys()
    )
    if stage == ALL_STAGES or not _one_per_module(stage):
        missing = []  # a pattern need not match every module
    files = tuple(sorted(chosen.values(), key=lambda mf: str(mf.path)))
    return Discovery(files=files, ignored=ignored, missing_stage=tuple(missing), problems=tuple(problems),
                     skipped=tuple(sorted(skipped)))


def _name_in_file(path: Path, format_: str) -> str:
    if format_ == TEXT:
        return module_name_in_file(path)
    from hloparse import protowire
    from hloparse.formats import read_head

    try:
        head = read_head(str(path))
        if head[:2] == b"\x1f\x8b":
            import zlib

            head = zlib.decompressobj(wbits=31).decompress(head, 1 << 16)
        return protowire.module_name_in_head(head)
    except Exception:  # noqa: BLE001 - a name is a convenience; the reader reports errors
        return ""


def _add_profile_programs(path: Path, chosen: dict, skipped: list[tuple[str, str]]) -> None:
    """Each program of a jax.profiler XSpace as its own module (`HOST.xplane.pb::jit_f(6)`); the run
    it came from is the directory it is in (`plugins/profile/RUN/`)."""
    from hloparse.errors import HloParseError
    from hloparse.inputs import xspace_modules

    try:
        with open(path, "rb") as f:
            data = f.read()
        names = [name for name, _ in xspace_modules(data, str(path))]
    except OSError:
        chosen[path] = ModuleFile(path, _stat_size(path), False, None, None)  # the reader reports it
        return
    except HloParseError as e:
        skipped.append((str(path), e.message))
        return
    size = _stat_size(path)
    for name in names:
        chosen[Path(f"{path}::{name}")] = ModuleFile(path, size, False, "profile", None, program=name)
