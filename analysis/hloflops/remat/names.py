"""What op_names say about recomputation: the whole name stack of each instruction, the remat
markers (jax's `rematted_computation` scope, XLA's `.remat` clone suffix, the `remat` frame of
older jax) and the part of a recompute's name inside its checkpoint.

Older jax (0.4.13 to at least 0.4.20; 0.4.26 prints `checkpoint/rematted_computation`) names
the transpose of a checkpoint with one frame, `remat`, that holds the recompute AND the backward
ops computed from it alike, and no `rematted_computation` at all:

    .../transpose(jvp(StackedMLPs))/while/body/remat/while/body/stack/Dense_0/dot_general  (remat_scan)
    .../transpose(jvp(while))/body/remat/dot_general                  (lax.scan of a jax.checkpoint)
    .../transpose(jvp(Stack))/remat/layer_0/Dense_0/dot_general       (nn.remat(Layer) in a loop)
    .../transpose(jvp(remat))/Stack/layer_0/Dense_0/dot_general       (a whole model checkpointed)

So an op under that frame is only a possible recompute (as under `rematted_computation`): the
pairing counts it only where a forward twin computes the same value, which the backward ops
never have. The forward ops of the checkpoint carry no `remat` frame (`jvp(Stack)/layer_0/...`),
and nor does a checkpoint outside any gradient (`jit(f)/remat/...` recomputes nothing).

A user may name a flax submodule `remat`: its backward ops read `transpose(jvp(Model))/remat/...`
like jax's frame. What tells them apart is the forward: the user's module runs there under the
same path (`jvp(Model)/remat/...`), jax's frame never does (`OldRematFrames`). `remat_0` or
`Remat_0` (flax's automatic names) are never the frame."""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Iterable

from hloflops.scopes import WRAPPER, is_absolute, model_components, split_components
from hloparse.ir import Computation, Instruction, Module

if TYPE_CHECKING:
    from hloflops.remat.values import Chain

REMAT_SCOPE = "rematted_computation"
XLA_REMAT_SUFFIX = re.compile(r"\.remat\d*$")


class OpNames:
    """Every instruction's op_name as a whole name stack. Before optimization, jax lowers each
    inner jitted function (`closed_call`, `checkpoint`'s body, ...) to a computation whose ops
    are named relative to it, and the `call` that runs it carries the caller's part
    (`checkpoint/rematted_computation/while/body/closed_call`): we join them along the call
    chain. While bodies, conditions and branches continue their enclosing function's names.
    After optimization the names are already whole and are kept as they are."""

    def __init__(self, module: Module, order: Iterable[str] | None = None):
        from hloflops.graph import call_table
        from hloflops.loops.execution import control_order, is_executing_site

        self.prefix: dict[str, str] = {}
        # op_name per distinct metadata text: decoding it once per instruction is most of the cost.
        self.by_metadata: dict[str | None, str] = {}
        self.first: dict[str | None, Instruction] = {}  # metadata text -> the instruction it was decoded from
        self.lists: dict[str, list[str]] = {}  # computation -> whole op_name of each instruction
        self.raws: dict[str, list[str | None]] = {}  # computation -> metadata text of each instruction
        self.decoded: set[str] = set()  # computations whose texts' op_names are in by_metadata
        # The module's call table (built once per module) lists each computation's call sites:
        # scanning every instruction for `calls` was most of this loop on large modules. Sites
        # come grouped by callee, first call first, so the first site that reaches a callee wins
        # as in instruction order.
        calls = call_table(module).calls
        prefix = self.prefix
        for name in order if order is not None else control_order(module):
            here = prefix.setdefault(name, "")
            for callee, site in calls.get(name, ()):
                if callee in prefix:
                    continue
                inst = site["instruction"]
                if not is_executing_site(inst, site["role"]):
                    continue
                prefix[callee] = self.call_prefix(here, inst.op_name) if inst.opcode == "call" else here

    @staticmethod
    def call_prefix(prefix: str, op_name: str) -> str:
        """The name a call's callee continues. A nested jit called from inside a called function
        is named `jit(_where)` relative to that function (jnp.take's index wrap inside the
        recompute's `jit(_take)`): a `jit(...)` name is the whole stack only where it starts with
        the caller's own first frame (`jit(loss)/...` in an optimized module)."""
        if prefix and is_absolute(op_name) and split_components(op_name)[:1] != split_components(prefix)[:1]:
            return f"{prefix}/{op_name}"
        return OpNames.join(prefix, op_name)

    @staticmethod
    def join(prefix: str, op_name: str) -> str:
        if not prefix or is_absolute(op_name):
            return op_name
        return f"{prefix}/{op_name}" if op_name else prefix

    def names_in(self, comp: Computation) -> list[str]:
        """The whole op_name of each instruction of `comp`, in order (worked out once)."""
        names = self.lists.get(comp.name)
        if names is None:
            names = list(map(self.by_metadata.__getitem__, self.metadata_in(comp)))
            prefix = self.prefix.get(comp.name)
            if prefix:
                join = self.join
                names = [join(prefix, name) for name in names]
            self.lists[comp.name] = names
        return names

    def metadata_in(self, comp: Computation) -> list[str | None]:
        """The metadata text of each instruction of `comp`, in order (None where absent), each
        text's op_name decoded once, from the first instruction that has it (`by_metadata`,
        `first`). The op_names of a large optimized module are a few thousand texts: the
        accounting and the remat pass read them per text, not per instruction."""
        raws = self.texts_in(comp)
        if comp.name not in self.decoded:
            self.decoded.add(comp.name)
            new = set(raws).difference(self.by_metadata)
            if new:
                for inst, raw in zip(comp.instructions, raws):
                    if raw in new:
                        new.discard(raw)
                        self.first[raw] = inst
                        self.by_metadata[raw] = inst.op_name
        return raws

    def texts_in(self, comp: Computation) -> list[str | None]:
        """The metadata text of each instruction of `comp`, in order (None where absent), not
        decoded."""
        raws = self.raws.get(comp.name)
        if raws is None:
            raws = self.raws[comp.name] = [inst.attributes.get("metadata") for inst in comp.instructions]
        return raws

    def any_name_holds(self, part: str, comps: Iterable[Computation]) -> bool:
        """Does the whole op_name of any instruction of `comps` hold `part` (no '/', newline,
        tab or backslash in it)? Looked for once per distinct metadata text, but in computations
        whose names continue a caller's (`prefix`), which are joined."""
        comps = list(comps)
        if not self._may_hold(part, comps):
            return False
        texts: set[str | None] = set()
        for comp in comps:
            if self.prefix.get(comp.name):
                if part in "\n".join(self.names_in(comp)):
                    return True
            else:
                texts.update(self.metadata_in(comp))
        by_metadata = self.by_metadata
        return any(part in by_metadata[raw] for raw in texts)

    def _may_hold(self, part: str, comps: list[Computation]) -> bool:
        """False where no op_name of `comps` can hold `part`, without decoding one: an op_name is
        a piece of its metadata text but for escapes (`\\"`, `\\n`, ...), so with the backslashes
        taken out a text holds every such part its op_name holds; a joined name holds the part
        only where its prefix or its own op_name does (the part has no '/'). Most modules have
        no remat name at all, and decoding every text to say so was most of the remat pass."""
        prefix = self.prefix
        if any(part in prefix.get(comp.name, "") for comp in comps):
            return True
        texts = set(chain.from_iterable(map(self.texts_in, comps)))
        texts.discard(None)
        return part in "\n".join(texts).replace("\\", "")

    def of(self, computation: str, inst: Instruction) -> str:
        raw = inst.attributes.get("metadata")
        op_name = self.by_metadata.get(raw)
        if op_name is None:
            op_name = self.by_metadata[raw] = inst.op_name
            self.first[raw] = inst
        prefix = self.prefix.get(computation)
        return self.join(prefix, op_name) if prefix else op_name


def site_names(module: Module, op_names: OpNames, comp: Computation, chain: Chain,
                prefixes: dict[int, str]) -> list[str]:
    """The whole op_name of each instruction of `comp` at one call site, reached by `chain`.
    Before optimization jax lowers a function once and `call`s it wherever it runs: a nested
    remat conv net's block (`jit(relu)`) is one computation for the outer checkpoint's
    recompute and for the inner checkpoint's recompute of each layer, and its ops are named
    relative to it. `OpNames` joins them with the first site's calls only, so every site's ops
    would carry the first site's name (one layer's, one checkpoint's): pairing by name would
    count them as copies of one op. Here each site's calls name its ops (`OpNames.call_prefix`
    along the chain; `prefixes` keeps each chain node's prefix by its id, so it must not
    outlive the numbering that holds the chains)."""
    return [OpNames.join(chain_prefix(module, chain, prefixes), name)
            for name in map(op_names.by_metadata.__getitem__, op_names.metadata_in(comp))]


def chain_prefix(module: Module, chain: Chain, prefixes: dict[int, str]) -> str:
    """The name a computation reached by `chain` continues: its callers' `call` names joined,
    as `OpNames` joins them along the first site's calls (a fusion, loop or branch adds none)."""
    pending = []  # the nodes whose prefix is not known yet, innermost first
    node = chain
    while node is not None and id(node) not in prefixes:
        pending.append(node)
        node = node[0]
    prefix = prefixes.get(id(node), "") if node is not None else ""
    for node in reversed(pending):
        _, caller, name = node
        inst = module.by_name[caller].by_name[name]
        if inst.opcode == "call":
            prefix = OpNames.call_prefix(prefix, inst.op_name)
        prefixes[id(node)] = prefix
    return prefix


def is_remat_named(inst: Instruction, op_name: str | None = None) -> bool:
    """Does the op carry a remat name (`rematted_computation`, a `.remat` clone)? Older jax's
    `remat` frame needs the module's other names to be told from a user's: `OldRematFrames`."""
    return REMAT_SCOPE in (inst.op_name if op_name is None else op_name) or bool(XLA_REMAT_SUFFIX.search(inst.name))


OLD_FRAME = re.compile(r"^remat\d*$")  # the bare frame; a user's `remat_0` is not it
OLD_WRAPPED = re.compile(r"^transpose\(jvp\(remat\d*\)\)$")  # a checkpoint at the top of the differentiated function


def old_frames(op_name: str) -> list[int]:
    """The positions (in `split_components`) of older jax's remat frames in an op_name, read
    from the name alone: `transpose(jvp(remat))`, or a bare `remat` after a `transpose(...)`
    frame (only the backward recomputes). A user's module named `remat` looks the same in the
    backward: `OldRematFrames` tells them apart."""
    if "remat" not in op_name:
        return []
    found: list[int] = []
    transposed = False
    for i, part in enumerate(split_components(op_name)):
        if part.startswith("transpose("):
            transposed = True
            if OLD_WRAPPED.match(part):
                found.append(i)
        elif transposed and OLD_FRAME.match(part):
            found.append(i)
    return found


def _forward_prefix(parts: list[str], frame: int) -> str | None:
    """The name the frame at `frame` would have in the forward pass, were it a module's name:
    the stack up to it with its `transpose(jvp(X))` read as `jvp(X)`. None for the wrapped form,
    which names no module."""
    out = []
    for part in parts[:frame + 1]:
        if part.startswith("transpose(") and part.endswith(")"):
            part = part[len("transpose("):-1]
        out.append(part)
    return None if OLD_WRAPPED.match(parts[frame]) else "/".join(out)


class OldRematFrames:
    """Which op_names of a module lie under older jax's remat frame (see the module docstring).
    Built from every whole op_name of the module: a bare `remat` frame of the backward is jax's
    unless some op runs under the same path in the forward, which makes it a user's module."""

    def __init__(self, op_names: Iterable[str]):
        names = set(op_names)
        self.candidates = {name for name in names if old_frames(name)}
        # every path ending in a bare `remat` component outside the transposed part of a name
        self.forward: set[str] = set()
        for name in names:
            if "remat" not in name:
                continue
            parts = split_components(name)
            for i, part in enumerate(parts):
                if part.startswith("transpose("):
                    break
                if OLD_FRAME.match(part):
                    self.forward.add("/".join(parts[:i + 1]))
        self._marked: dict[str, int] = {}

    def depth(self, op_name: str) -> int:
        """How many of jax's old remat frames the op lies under (0: none, or only users' names)."""
        if op_name not in self.candidates:
            return 0
        depth = self._marked.get(op_name)
        if depth is None:
            parts = split_components(op_name)
            depth = self._marked[op_name] = sum(_forward_prefix(parts, i) not in self.forward
                                                for i in old_frames(op_name))
        return depth

    def __contains__(self, op_name: str) -> bool:
        return self.depth(op_name) > 0

    def __bool__(self) -> bool:
        return any(name in self for name in self.candidates)


def old_remat_frames(op_names: OpNames, comps: list[Computation]) -> OldRematFrames | None:
    """The old remat frames of `comps`' op_names, or None where there are none (asked where some
    op_name holds `remat`). A module that names a recompute `rematted_computation` comes from a
    jax that never prints the old frame: its bare `remat` frames are users' names."""
    if op_names.any_name_holds(REMAT_SCOPE, comps):
        return None
    frames = OldRematFrames(chain.from_iterable(map(op_names.names_in, comps)))
    return frames if frames else None


def remat_depth(op_name: str) -> int:
    """How many checkpoints an op_name is recomputed under (nested remat recomputes twice). A
    name with older jax's frames and no `rematted_computation` counts those frames."""
    depth = op_name.count(REMAT_SCOPE)
    return depth if depth else len(old_frames(op_name))


def enclosing_checkpoints(op_name: str) -> int:
    """How many checkpoints enclose a recompute's innermost `rematted_computation`. Nested remat
    recomputes an inner layer twice, and jax names only one of the two recomputes a
    `rematted_computation` each: the outer checkpoint's recompute of the layer
    (`.../checkpoint/rematted_computation/stack/block_0/Conv_0/...`) and the inner checkpoint's
    recompute inside the outer one's backward (`.../checkpoint/stack/checkpoint/
    rematted_computation/block_0/Conv_0/...`, TPU draw 16). Both are one remat deep, and both
    run: the forward twin serves each."""
    parts = op_name.split("/")
    last = max((i for i, part in enumerate(parts) if part == REMAT_SCOPE), default=0)
    return sum(part == "checkpoint" for part in parts[:last])


def remat_level(op_name: str, inherited: bool = False) -> tuple[int, int]:
    """A recompute's level: its remat depth (one for an op named by its inputs, `inherit_names`)
    and the checkpoints around its innermost `rematted_computation` (`enclosing_checkpoints`).
    Nested remat recomputes an inner layer at two levels, each with its own copies."""
    return (1 if inherited else remat_depth(op_name), enclosing_checkpoints(op_name))


def inner_tail(op_name: str) -> tuple[str, ...]:
    """A recompute's name inside its innermost checkpoint, wrappers removed:
    `.../checkpoint/rematted_computation/block_0/mlp/Dense_0/dot_general` gives
    `('block_0', 'mlp', 'Dense_0', 'dot_general')`. Whatever jax and flax put in front of the checkpoint (a
    repeated module name, a class name, a scan's name twice) is not part of it. Older jax's
    frame (`.../remat/stack/Dense_0/dot_general`) ends the prefix the same way."""
    if REMAT_SCOPE not in op_name:
        frames = old_frames(op_name)
        if frames:
            return model_components("/".join(split_components(op_name)[frames[-1] + 1:]))
    inner = op_name.rpartition(REMAT_SCOPE)[2]
    return tuple(model_components(inner))


_JVP = re.compile(r"^jvp\((.+)\)$")


@lru_cache(maxsize=65536)  # pure; `ends_with` asks it for each pair of candidate names
def named_components(op_name: str) -> tuple[str, ...]:
    """Model components, plus the module name jax writes inside `jvp(...)`: a forward op of a
    model remat'd as a whole is named `jvp(LM)/decoder/...`, its recompute
    `.../rematted_computation/LM/decoder/...`. The name inside may carry brackets of its own:
    equinox names a layer applied over a batch `vmap(eqx.nn.Linear)`, its forward op
    `jvp(vmap(eqx.nn.Linear))/dot_general`, its recompute `.../rematted_computation/
    vmap(eqx.nn.Linear)/dot_general` (TPU draw 42); a wrapper inside (`jvp(jvp())`) names nothing."""
    out: list[str] = []
    for part in split_components(op_name):
        named = _JVP.match(part)
        if named:
            out.extend(p for p in split_components(named.group(1)) if not WRAPPER.match(p))
        elif part and not WRAPPER.match(part):
            out.append(part)
    return tuple(out)


def ends_with(op_name: str, tail: tuple[str, ...]) -> bool:
    """Does the op's name end with a recompute's inner name (`inner_tail`)?"""
    if not tail:
        return True
    return model_components(op_name)[-len(tail):] == tail or named_components(op_name)[-len(tail):] == tail
