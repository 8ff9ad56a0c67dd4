"""Which module files of a batch are the same program compiled again, and which are different
programs that happen to share a module name.

A jax user reading "compiled 3" is hunting recompilations: the same jitted function traced and
compiled again, for new shapes, dtypes or a changed static argument that leaves its operations
as they were. Two different functions that share a name (`jit_f` from two closures, a
`train_step` with and without remat) are not a recompilation: they are two programs.

So a module's identity is its name plus a **program fingerprint** that ignores what a
recompilation changes and keeps what makes the program another one:

- kept: the set of its instructions' jax op_names (of the dump's `before_optimizations` text when
  there is one: the program as jax lowered it; else of the analysed text), the name stack that
  says which operation of which function, Flax module and transformation each one is
  (`jit(train_step)/transpose(jvp(Block_0))/checkpoint/dot_general`; remat adds its frames, another
  function has other operations);
- dropped: shapes, layouts, dtypes, instruction names and ids, the dump's module id, the order
  and the opcodes of the text (what XLA's passes do differently with other shapes: a CPU dot
  becomes a oneDNN custom-call at some sizes), and the primitive parameters older jax printed
  inside op_names (`broadcast_in_dim[shape=(3, 3) ...]`, which carry the shapes);
- not used: source locations. The ops of a jitted library function (`jnp.ones` compiles
  `jit_broadcast_in_dim`) carry the line that called it, so one function called from two lines
  would read as two programs.

The price: two different functions with one name whose operations have the same names (`x * 2`
and `x * 3`, both `jit_f`) read as one program compiled twice.

A module without any op_name (hand-written HLO) is fingerprinted by its set of opcodes instead.
Files are grouped per dump directory (one run's dump): the same program in two directories is
two runs, not a recompilation (processes that dump into one directory, as under `hloflops run`,
are one run: each compilation counts). Within a group, "compiled N" is the number
of module files; programs that share a name are numbered in compile order (the dump's timestamp
prefix and module id), `jit_f#1`, `jit_f#2`: no space, so that the table still splits on
whitespace, and `#` is in no module name jax makes.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from hloflops.batch.db import OK
from hloflops.batch.discovery import BEFORE_OPTIMIZATIONS, parse_dump_name

if TYPE_CHECKING:  # the worker imports the parser lazily, so that a broken install is a row, not a crash
    from hloparse.ir import Module

FINGERPRINT_CHARS = 16  # hex digits kept of the sha256: ~64 bits, collisions out of reach


def strip_primitive_params(op_name: str) -> str:
    """The op_name without the `[key=value ...]` parameters older jax printed after each primitive
    (balanced brackets; a pytree path such as `state[1]` or `inputs['ids']` has no `=` and stays).
    One pass (an op_name is file content: unbalanced brackets must not make it quadratic)."""
    if "[" not in op_name or "=" not in op_name:
        return op_name
    out: list[str] = []
    open_brackets: list[list[Any]] = []  # per open '[': [its position in `out`, whether its text has '=']
    for char in op_name:
        if char == "[":
            open_brackets.append([len(out), False])
        elif char == "]" and open_brackets:
            position, has_equals = open_brackets.pop()
            if open_brackets:
                open_brackets[-1][1] = open_brackets[-1][1] or has_equals
            if has_equals:
                del out[position:]
                continue
        elif char == "=":
            for bracket in open_brackets[-1:]:
                bracket[1] = True
        out.append(char)
    return "".join(out)


# An op_name in HLO text: a quoted string, escapes included (read off the text, not parsed: the
# batch parent reads a dump's before-optimizations text with it, without the parser). The key must
# start a word (`\bop_name`), but a pattern that starts with `\b` makes `re` try every position of the
# text (0.86 s on a 29 MB module); one that starts with the literal jumps from one `op_name="` to the
# next (0.08 s), and `op_names` checks the character before each match instead.
_OP_NAME = re.compile(r'op_name="([^"\\]*(?:\\.[^"\\]*)*)"')


def op_names(text: str) -> list[str]:
    """Every `op_name="..."` value in the text, escapes kept as written, in order: what
    `re.findall(r'\bop_name="((?:[^"\\]|\\.)*)"', text)` finds (tests/batch/test_programs.py)."""
    found: list[str] = []
    search, position = _OP_NAME.search, 0
    while (match := search(text, position)) is not None:
        start = match.start()
        if start and (text[start - 1].isalnum() or text[start - 1] == "_"):  # inside a longer word: `\b` fails
            position = start + 1
            continue
        found.append(match.group(1))
        position = match.end()
    return found


def fingerprint_of_text(text: str) -> str | None:
    """The program fingerprint of a module's text from its op_names; None when it has none."""
    names = {strip_primitive_params(m) for m in set(op_names(text))}
    return _digest(f"op_name\0{name}" for name in names if name) if any(names) else None


def program_fingerprint(module: Module, text: str) -> str:
    """The fingerprint of a parsed module and its text (see the module docstring): its op_names,
    or without any (hand-written HLO) its set of opcodes."""
    found = fingerprint_of_text(text)
    if found is not None:
        return found
    return _digest(f"opcode\0{instruction.opcode}" for _c, instruction in module.instructions())


def _digest(items: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for item in sorted(set(items)):
        digest.update(item.encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return digest.hexdigest()[:FINGERPRINT_CHARS]


MAX_SIBLING_BYTES = 1 << 30  # a before-optimizations text larger than this is not read


def dump_fingerprint(path: Path, stage: str) -> str | None:
    """The fingerprint of a dump module from its `before_optimizations` text beside it, None when
    there is none (or it cannot be read, or has no op_name). The text as jax lowered it, before
    XLA's passes: those drop ops, and their op_names, at some shapes (a broadcast to `f32[1]`
    becomes a bitcast), which would make one program compiled for two shapes read as two."""
    name = path.name
    suffix = f"{stage}.txt"
    if not name.endswith(suffix):
        return None
    sibling = path.with_name(name[: -len(suffix)] + BEFORE_OPTIMIZATIONS + ".txt")
    try:
        st = os.stat(sibling)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SIBLING_BYTES:
            return None
        with open(sibling, encoding="utf-8", errors="replace") as f:
            return fingerprint_of_text(f.read())
    except OSError:
        return None


_LAYOUT = re.compile(r"\{[^{}]*\}")


def entry_signature(module: Module) -> str:
    """What the ENTRY computation takes and returns, without layouts: `(f32[3,3]) -> f32[3,3]`
    (what tells a program's compilations apart when it was recompiled for new shapes)."""
    entry = module.entry
    params = sorted(entry.parameters, key=lambda p: int(p.attributes.get("parameter_number", "0")))
    args = ", ".join(_LAYOUT.sub("", str(p.shape)) for p in params)
    return f"({args}) -> {_LAYOUT.sub('', str(entry.root.shape))}"


def identity_fields(module: Module, text: str) -> dict[str, str]:
    """The batch record's program columns, from the analysed text (the batch parent replaces the
    fingerprint with the dump's before-optimizations one where there is one: `dump_fingerprint`)."""
    return {"program_fingerprint": program_fingerprint(module, text), "entry_signature": entry_signature(module)}


@dataclass(frozen=True, slots=True)
class Program:
    """One program of a batch: a module name and fingerprint within one dump directory."""

    label: str  # the module name, with `#k` when other programs in the directory share it
    compiled: int  # module files of this program in the directory: times XLA compiled it


def _group_key(row: Mapping[str, Any]) -> tuple[str, str, str | None]:
    # A row without a fingerprint (a database written before fingerprints) is grouped by name
    # alone: nothing finer is known about it.
    return os.path.dirname(row["path"]), row["module_name"] or "", row.get("program_fingerprint")


def _compile_order(row: Mapping[str, Any]) -> tuple[str, int, str]:
    # `hloflops run`'s timestamp prefix first (module ids restart in each process), then the id
    dump = parse_dump_name(os.path.basename(row["path"]))
    return (dump.prefix, dump.module_id, row["path"]) if dump is not None else ("", -1, row["path"])


def programs(rows: Iterable[Mapping[str, Any]]) -> dict[str, Program]:
    """Each analysed row's program, by the row's path. A file that failed is in no program: which
    program it holds is not known (it may not even be the name's)."""
    groups: dict[tuple[str, str, str | None], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("status", OK) != OK:
            continue
        groups.setdefault(_group_key(row), []).append(row)
    by_name: dict[tuple[str, str], list[tuple[tuple[str, int, str], tuple[str, str, str | None]]]] = {}
    for key, members in groups.items():
        first = min(_compile_order(r) for r in members)
        by_name.setdefault(key[:2], []).append((first, key))
    out: dict[str, Program] = {}
    for (_directory, name), keyed in by_name.items():
        keyed.sort()
        for number, (_first, key) in enumerate(keyed, start=1):
            label = name if len(keyed) == 1 else f"{name}#{number}"
            members = groups[key]
            for row in members:
                out[row["path"]] = Program(label, len(members))
    return out


def recompiled_lines(rows: Iterable[Mapping[str, Any]], *, top: int = 20, width: int | None = None) -> list[str]:
    """The summary's section on programs XLA compiled more than once in one dump, most compiled
    first, each with the entry signatures it was compiled for (`x2` where one signature was
    compiled twice: not a new shape but, say, a static argument or a cleared cache). Empty when
    every program was compiled once."""
    analysed = {r["path"]: r for r in rows if r.get("status", OK) == OK}
    by_program: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for path, program in programs(analysed.values()).items():
        if program.compiled > 1:
            by_program.setdefault((os.path.dirname(path), program.label), []).append(analysed[path])
    if not by_program:
        return []
    ordered = sorted(by_program.items(), key=lambda kv: (-len(kv[1]), kv[0][1], kv[0][0]))
    lines = [f"Compiled more than once (same name and program in one dump; {len(ordered)} programs):"]
    name_width = max(len(label) for (_d, label), _rows in ordered[:top])
    for (_directory, label), members in ordered[:top]:
        signatures: dict[str, int] = {}
        for row in sorted(members, key=_compile_order):
            signature = row.get("entry_signature") or "?"
            signatures[signature] = signatures.get(signature, 0) + 1
        lead = f"  {label.ljust(name_width)}  {len(members)} times: "
        listed = [s + (f" x{n}" if n > 1 else "") for s, n in signatures.items()]
        lines.append(lead + _fit_list(listed, None if width is None else width - len(lead)))
    return lines


def _fit_list(items: list[str], room: int | None) -> str:
    """`items` joined by `; `, the first ones that fit `room` characters and `+N more` (None: all)."""
    joined = "; ".join(items)
    if room is None or len(joined) <= room:
        return joined
    shown: list[str] = []
    for i, item in enumerate(items):
        more = f"; +{len(items) - i - 1} more" if i < len(items) - 1 else ""
        if len("; ".join([*shown, item]) + more) > room and shown:
            break
        shown.append(item)
    rest = len(items) - len(shown)
    return "; ".join(shown) + (f"; +{rest} more" if rest else "")
