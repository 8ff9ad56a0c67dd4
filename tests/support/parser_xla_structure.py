"""XLA's own parse of HLO text, reduced to structure, and the same structure from hloparse.

A module's structure is a list of computations, each `{"name": ..., "entry": bool, "root": k,
"instructions": [[opcode, [operand positions]], ...], "calls": {k: [callee names]}}`: the opcode
in the text format's spelling, each operand as its position in the computation's instruction
list, the ROOT's position, the computations each instruction calls (compared through the
callees' structure, since their names differ too) and each instruction's shape without layouts
(`canonical_shape`).
Names are left out on purpose: XLA makes instruction names module-unique (`param` ->
`param.1`), names operands written as nested instructions `parameter.anon`, and names the
computation it synthesises for the async shorthand `async_wrapped`, while hloparse uses
`<user>.operand<k>.anon` and `<start>.async_wrapped`.

Found by comparing the two on all 4,282 modules XLA accepts (not assumed): jaxlib's
`HloComputation.instructions()` keeps the text order of the instructions, so the sequences can be
compared position by position. `HloModule.computations()` is in text order too, but XLA's
synthesised computations sit elsewhere than ours, so computations are matched by name and by
structure, not by position. The Python binding does not expose the ENTRY or the ROOTs, so they are
read from XLA's printout of the module (instruction names are module-unique after XLA's parse),
as are the callees (`calls=`, `to_apply=`, `body=`, ...); for an async computation, which the
printout folds into the async shorthand, from `async_wrapped_root()`.

Asking XLA costs about 90 s for the whole corpus, so `xla_structures` keeps the answers in a JSON
file keyed by a hash of the text (and named by jaxlib's version); deleting it re-asks XLA. XLA
runs in worker processes: an abort inside XLA's C++ must not take the test session down with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

Structure = list[dict[str, Any]]
FORMAT = 5  # bump when the structure's fields change: the cache is then rebuilt

# HloOpcode members whose text spelling is not the member name in kebab case
# (xla/hlo/ir/hlo_opcode.h: V(kCos, "cosine", 1) and so on).
_SPELLING_EXCEPTIONS = {
    "kClz": "count-leading-zeros",
    "kCos": "cosine",
    "kExp": "exponential",
    "kExpm1": "exponential-minus-one",
    "kLog1p": "log-plus-one",
    "kOptimizationBarrier": "opt-barrier",
    "kPopulationCount": "popcnt",
    "kSin": "sine",
    "kTopK": "topk",
}
_CAMEL_HUMP = re.compile(r"(?<!^)([A-Z])")


def opcode_spelling(member_name: str) -> str:
    """`kGetTupleElement` -> `get-tuple-element`: how the text format spells an HloOpcode member.

    Not read from `HloInstruction.to_string()`: XLA prints an async-start that wraps one op in the
    shorthand (`all-reduce-start`), so the printed word is not the opcode."""
    if member_name in _SPELLING_EXCEPTIONS:
        return _SPELLING_EXCEPTIONS[member_name]
    return _CAMEL_HUMP.sub(r"-\1", member_name[1:]).lower()


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def xla_structure(text: str) -> Structure:
    """Parse with jaxlib (XLA 0.10.2) and reduce to structure. Raises whatever XLA raises."""
    from jaxlib import _hlo

    module = _hlo.hlo_module_from_text(text)
    options = _hlo.HloPrintOptions()
    options.print_metadata = False  # strings that could hold anything, and most of the text
    options.print_backend_config = False
    printed = module.to_string(options)
    entry = _PRINTED_ENTRY.search(printed)
    roots = set(_PRINTED_ROOT.findall(printed))
    printed_names = set(_PRINTED_INSTRUCTION.findall(printed))
    shapes = _printed_shapes(printed)
    callees = _printed_callees(printed)
    home = {inst.name: comp.name for comp in module.computations() for inst in comp.instructions()}
    # XLA prints an async computation inside its async-start's shorthand (`all-reduce-start(x),
    # to_apply=add`): no ROOT, no calls=, and the wrapped op's own callees on the start's line. The
    # instruction still knows the wrapped computation's root.
    for comp in module.computations():
        for inst in comp.instructions():
            if inst.opcode.name in _ASYNC_OPCODES:
                wrapped_root = inst.async_wrapped_root()
                if wrapped_root is None:
                    continue
                roots.add(wrapped_root.name)
                if inst.opcode.name == "kAsyncStart":
                    if wrapped_root.name not in printed_names and callees.get(inst.name):
                        callees[wrapped_root.name] = callees[inst.name]
                    callees[inst.name] = [home[wrapped_root.name]]
                else:
                    callees[inst.name] = []
    out: Structure = []
    for comp in module.computations():
        insts = comp.instructions()
        position = {inst.name: k for k, inst in enumerate(insts)}
        rows = [[opcode_spelling(inst.opcode.name), [position[o.name] for o in inst.operands()]] for inst in insts]
        root = [k for k, inst in enumerate(insts) if inst.name in roots]
        calls = {str(k): sorted(callees[inst.name]) for k, inst in enumerate(insts) if callees.get(inst.name)}
        out.append({"name": comp.name, "entry": entry is not None and comp.name == entry.group(1),
                    "root": root[0] if len(root) == 1 else None, "instructions": rows, "calls": calls,
                    "shapes": [shapes.get(inst.name) for inst in insts]})
    return out


_ASYNC_OPCODES = ("kAsyncStart", "kAsyncUpdate", "kAsyncDone")
_PRINTED_ENTRY = re.compile(r"^ENTRY %?([^\s(]+)", re.M)
_PRINTED_ROOT = re.compile(r"^\s*ROOT %?([^\s=]+) =", re.M)
_PRINTED_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([^\s=]+) = ", re.M)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
# The attributes through which an instruction names the computations it calls.
_CALL_ATTRIBUTE = re.compile(
    r"[ ,](?:calls|to_apply|condition|body|true_computation|false_computation|branch_computations|select|scatter"
    r"|called_computations)=(\{[^}]*\}|%?[^\s,{}]+)")


_LAYOUT = re.compile(r"\{[^{}]*\}")
_COMMENT = re.compile(r"/\*.*?\*/")


def canonical_shape_text(text: str) -> str:
    """A printed shape without layouts, comments or spaces: `(f32[2]{0}, /*index=1*/s32[])` ->
    `(f32[2],s32[])`. Layouts are left out: XLA gives every array a default layout where the text
    has none, while the IR keeps None."""
    text = _COMMENT.sub("", text)
    previous = None
    while previous != text:
        previous, text = text, _LAYOUT.sub("", text)
    return re.sub(r"\s+", "", text)


def canonical_shape(shape: Any) -> str:
    """The same canonical text, written from an IR Shape's fields (not from Shape.__str__)."""
    if shape.element_type == "tuple":
        return "(" + ",".join(canonical_shape(s) for s in shape.tuple_shapes) + ")"
    if shape.element_type == "buffer":
        return "b(" + canonical_shape(shape.tuple_shapes[0]) + ")"
    dynamic = shape.dynamic or (False,) * len(shape.dims)
    dims = ["?" if d < 0 else ("<=" if dyn else "") + str(d) for d, dyn in zip(shape.dims, dynamic)]
    return f"{shape.element_type}[{','.join(dims)}]"


def _printed_shapes(printed: str) -> dict[str, str]:
    """{instruction name: canonical shape} from XLA's printout."""
    out = {}
    for line in printed.split("\n"):
        m = _PRINTED_INSTRUCTION.match(line)
        if m is None:
            continue
        rest = line[m.end():]
        if rest.startswith("("):
            depth = 0
            for end, char in enumerate(rest):
                depth += (char == "(") - (char == ")")
                if depth == 0:
                    break
            text = rest[: end + 1]
        else:
            text = rest.split(" ", 1)[0]
        out[m.group(1)] = canonical_shape_text(text)
    return out


def _printed_callees(printed: str) -> dict[str, list[str]]:
    """{instruction name: names of the computations it calls} from XLA's printout."""
    out: dict[str, list[str]] = {}
    for line in printed.split("\n"):
        m = _PRINTED_INSTRUCTION.match(line)
        if m is None:
            continue
        names = []
        for value in _CALL_ATTRIBUTE.findall(_STRING.sub('""', line)):
            names += [n.strip().lstrip("%") for n in value.strip("{}").split(",") if n.strip()]
        if names:
            out[m.group(1)] = names
    return out


def our_structure(module: Any) -> Structure:
    """The same reduction of an hloparse Module."""
    out: Structure = []
    for comp in module.computations:
        position = {inst.name: k for k, inst in enumerate(comp.instructions)}
        rows = [[inst.opcode, [position[o] for o in inst.operands]] for inst in comp.instructions]
        calls = {str(k): sorted(site.computation for site in inst.calls)
                 for k, inst in enumerate(comp.instructions) if inst.calls and inst.opcode not in _ASYNC_FOLLOWERS}
        out.append({"name": comp.name, "entry": comp.name == module.entry_name,
                    "root": position[comp.root.name], "instructions": rows, "calls": calls,
                    "shapes": [canonical_shape(inst.shape) for inst in comp.instructions]})
    return out


# async-update/async-done name their async-start's computation, which runs once, at the start: the
# IR gives them no call site, and XLA's side leaves them out to match.
_ASYNC_FOLLOWERS = ("async-update", "async-done")


def _xla_structures_of_files(paths: list[str]) -> dict[str, Any]:
    """Worker: {text hash: structure or {"error": message}} for each file."""
    out: dict[str, Any] = {}
    for path in paths:
        text = Path(path).read_text(encoding="utf-8")
        try:
            out[text_key(text)] = xla_structure(text)
        except Exception as e:  # XLA's rejection is data here; the caller decides what it means
            out[text_key(text)] = {"error": f"{type(e).__name__}: {e}"[:500]}
    return out


def cache_file() -> Path:
    import jaxlib

    root = os.environ.get("HLOFLOPS_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hloflops-tests")
    return Path(root) / "parser-xla-structure" / f"jaxlib-{jaxlib.__version__}-v{FORMAT}.json"


def xla_structures(paths: Iterable[Path], workers: int = 2, chunk: int = 40) -> dict[str, Any]:
    """{text hash: XLA's structure (or {"error": ...})} for every file, from the cache where it
    has the text's hash, else from XLA in `workers` child processes (then saved)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    store = cache_file()
    cached: dict[str, Any] = {}
    if store.is_file():
        try:
            cached = json.loads(store.read_text())
        except ValueError:
            cached = {}  # a torn write: ask XLA again
    wanted: dict[str, str] = {}
    for path in paths:
        key = text_key(Path(path).read_text(encoding="utf-8"))
        if key not in cached:
            wanted.setdefault(key, str(path))
    if wanted:
        todo = list(wanted.values())
        chunks = [todo[i : i + chunk] for i in range(0, len(todo), chunk)]
        crashed: list[str] = []
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = [(part, pool.submit(_xla_structures_of_files, part)) for part in chunks]
            for part, future in futures:
                try:
                    cached.update(future.result())
                except BrokenProcessPool:  # XLA aborted in some file of the chunk (or one before it)
                    crashed += part
        for path in crashed:  # one process per file: the one that aborts is recorded, not fatal
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as single:
                try:
                    cached.update(single.submit(_xla_structures_of_files, [path]).result())
                except BrokenProcessPool:
                    text = Path(path).read_text(encoding="utf-8")
                    cached[text_key(text)] = {"error": "XLA aborted (its process died) parsing this text"}
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, separators=(",", ":")))
        os.replace(tmp, store)
    return cached


def compare_structures(ours: Structure, xla: Structure) -> list[str]:
    """Differences between two module structures, as readable lines ([] when they agree).

    Computations are paired first by name and identical structure, then by identical structure
    alone (renamed synthesised computations), then by name alone (reported with the first
    instruction that differs); whatever is left unpaired on either side is reported. What an
    instruction calls is compared through the callees' own structure, not their names."""
    ours_left = [_with_callee_structure(c, ours) for c in ours]
    xla_left = [_with_callee_structure(c, xla) for c in xla]

    def take(pred) -> list[tuple[dict, dict]]:  # noqa: ANN001
        pairs = []
        for o in list(ours_left):
            for x in xla_left:
                if pred(o, x):
                    pairs.append((o, x))
                    ours_left.remove(o)
                    xla_left.remove(x)
                    break
        return pairs

    take(lambda o, x: o["name"] == x["name"] and _same(o, x))
    take(_same)
    problems = []
    for o, x in take(lambda o, x: o["name"] == x["name"]):
        problems.append(f"computation {o['name']!r}: {first_difference(o, x)}")
    for o in ours_left:
        problems.append(f"computation {o['name']!r} ({len(o['instructions'])} instructions) has no XLA counterpart")
    for x in xla_left:
        problems.append(f"XLA's computation {x['name']!r} ({len(x['instructions'])} instructions) has no counterpart")
    return problems


def _fingerprint(comp: dict) -> str:
    return json.dumps([comp["instructions"], comp["root"]], separators=(",", ":"))


def _with_callee_structure(comp: dict, module: Structure) -> dict:
    """The computation with `callees`: for each calling instruction, the sorted fingerprints of the
    computations it calls (so that renamed but identical callees compare equal)."""
    by_name = {c["name"]: c for c in module}
    callees = {}
    for k, names in comp.get("calls", {}).items():
        callees[k] = sorted(_fingerprint(by_name[n]) if n in by_name else f"<missing {n}>" for n in names)
    return {**comp, "callees": callees}


def _same(o: dict, x: dict) -> bool:
    return (o["instructions"] == x["instructions"] and o["root"] == x["root"] and o["entry"] == x["entry"]
            and o["callees"] == x["callees"] and _shape_difference(o, x) is None)


def _shape_difference(o: dict, x: dict) -> int | None:
    """The first instruction whose shape differs (where XLA printed one: an op folded into the
    async shorthand is not printed on a line of its own)."""
    for k, (ours, xla) in enumerate(zip(o.get("shapes", ()), x.get("shapes", ()))):
        if xla is not None and ours != xla:
            return k
    return None


def first_difference(ours: dict, xla: dict) -> str:
    for k, (o, x) in enumerate(zip(ours["instructions"], xla["instructions"])):
        if o != x:
            return f"instruction #{k}: ours {o[0]}{tuple(o[1])}, XLA {x[0]}{tuple(x[1])}"
    if len(ours["instructions"]) != len(xla["instructions"]):
        return f"{len(ours['instructions'])} instructions, XLA has {len(xla['instructions'])}"
    if ours["root"] != xla["root"]:
        return f"ROOT is instruction #{ours['root']}, XLA's is #{xla['root']}"
    k = _shape_difference(ours, xla)
    if k is not None:
        return (f"instruction #{k} ({ours['instructions'][k][0]}) has shape {ours['shapes'][k]}, "
                f"XLA's {xla['shapes'][k]}")
    for k in sorted(set(ours["callees"]) | set(xla["callees"]), key=int):
        if ours["callees"].get(k) != xla["callees"].get(k):
            return (f"instruction #{k} calls {ours.get('calls', {}).get(k, [])}, XLA's calls "
                    f"{xla.get('calls', {}).get(k, [])} (different computations)")
    return f"ENTRY: ours {ours['entry']}, XLA {xla['entry']}"
