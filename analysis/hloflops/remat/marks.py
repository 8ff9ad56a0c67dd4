"""Which ops are marked as a recompute's, beyond their own op_name: ops XLA left without a name
(named by what they read, or by what reads them), a policy's saved residual, and work of
constants alone that only a checkpoint's barrier keeps jax from folding. The pairing
(hloflops.remat.pairing) then decides which marked ops are real recomputation."""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from hloflops.cost.rules import ELEMENTWISE_FLOP_OPCODES
from hloflops.remat.names import REMAT_SCOPE, OpNames, ends_with, inner_tail
from hloflops.scopes import phase, split_components
from hloparse.ir import CallRole, Computation, Instruction, Module
from hloflops.remat.sites import Key, SiteKey, SiteOp
from hloflops.remat.op_kinds import MATMUL_OPCODES, shape_key
from hloflops.remat.signature import signature


# What a value computed from constants alone passes through: an optimization barrier, a tuple and
# its elements, and ops that only move or cast elements.
CONSTANT_THROUGH = frozenset({"opt-barrier", "tuple", "get-tuple-element", "broadcast", "reshape", "bitcast",
                              "convert", "copy", "transpose"})


def folded_without_barrier(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """Before optimization, an arithmetic op marked by an optimization barrier (not remat-named)
    whose operands are constants alone, through the barrier: without the checkpoint jax computes
    that value while tracing (the gradient's seed `1.0` divided by a mean's count is a Python
    float), so only the program with remat runs it (seeds 0, 2 and every whole-model checkpoint
    before optimization: the checkpoint's transpose divides the cotangent `1.0`, passed through
    its barrier, by the loss's count: 1 FLOP the program without remat folds). Remat FLOPs by
    the definition, though nothing is recomputed."""
    memo: dict[Key, bool] = {}

    def inputs(comp: Computation, inst: Instruction) -> list[Key]:
        """What the value is made of: a tuple element's op (through barriers), else the operands."""
        if inst.opcode == "tuple":
            return []  # only the element a get-tuple-element takes is followed
        if inst.opcode != "get-tuple-element":
            return [(comp.name, o) for o in inst.operands]
        source = comp.by_name.get(inst.operands[0]) if inst.operands else None
        while source is not None and source.opcode == "opt-barrier" and source.operands:
            source = comp.by_name.get(source.operands[0])
        index = int(inst.attributes.get("index", "0"))
        if source is None or source.opcode != "tuple" or index >= len(source.operands):
            return []
        return [(comp.name, source.operands[index])]

    def constant(key: Key) -> bool:
        stack = [(key, False)]
        while stack:  # post-order, without recursion: a chain through a barrier's tuple can be long
            top, expanded = stack.pop()
            if top in memo:
                continue
            comp = module.by_name[top[0]]
            inst = comp.by_name.get(top[1])
            if inst is None or (inst.opcode != "constant" and inst.opcode not in CONSTANT_THROUGH):
                memo[top] = False
                continue
            parts = inputs(comp, inst)
            if not expanded:
                stack.append((top, True))
                stack += [(part, False) for part in parts if part not in memo]
            else:
                memo[top] = inst.opcode == "constant" or (bool(parts) and all(memo.get(p, False) for p in parts))
        return memo[key]

    found: set[SiteKey] = set()
    for op in ops:
        if op.named or not op.marked or op.inst.opcode not in ELEMENTWISE_FLOP_OPCODES or not op.inst.operands:
            continue
        if all(constant((op.key[0], o)) for o in op.inst.operands):
            found.add(op.key)
    return found


def constants_in_checkpoint_transpose(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """After optimization, an arithmetic op of constants alone named in a checkpoint's transpose
    (`transpose(jvp(...))/checkpoint/mul`, outside its `rematted_computation`) runs only with
    remat: the transpose rule re-emits the scale the backward applies (the mean loss's `1 / n`
    times the cotangent seed `1`, a constant named `transpose(...)/remat2`), and XLA copies the
    product into each fusion that reads it; the program without remat folds it into the
    backward's constants (seed 2, a whole-model checkpoint of an LM: three copies, multiply +3).
    The after-optimization side of `folded_without_barrier`. The program without remat has no
    checkpoint scope: this marks nothing there."""
    found: set[SiteKey] = set()
    for op in ops:
        if op.named or op.inst.opcode not in ELEMENTWISE_FLOP_OPCODES or not op.inst.operands or \
                not _in_checkpoint_transpose(op.op_name):
            continue
        comp = module.by_name[op.key[0]]
        if all(_constant_here(comp, name) for name in op.inst.operands):
            found.add(op.key)
    return found


def _in_checkpoint_transpose(op_name: str) -> bool:
    """Is the name inside a checkpoint's scope within a transpose (the backward pass)?"""
    parts = split_components(op_name)
    first = next((i for i, part in enumerate(parts) if part.startswith("transpose(")), None)
    return first is not None and "checkpoint" in parts[first + 1:]


def _constant_here(comp: Computation, name: str) -> bool:
    """Is the operand a constant of its own computation, through ops that only move or cast it?"""
    inst = comp.by_name.get(name)
    while inst is not None and inst.opcode in CONSTANT_THROUGH and len(inst.operands) == 1:
        inst = comp.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode == "constant"


def inherit_names(module: Module, ops: list[SiteOp], op_names: OpNames) -> None:
    """Ops that XLA left without metadata (the dots of a CPU library fusion: the fusion and its
    dot carry no op_name) are named as what they read: an op without a name that reads a
    remat-named value and otherwise (constants aside) only remat-named or forward values is part
    of the recompute (a recompute's cross-attention logits read the recomputed query and the
    forward's keys, where CSE merged the keys' recompute into the forward). One that reads a
    gradient too is the backward's. A program input (an entry parameter: a weight) counts as a
    forward value, read by the recompute as by the forward and never a gradient: TPU's
    `reduce(broadcast(v) * w)` for a small matrix-vector product leaves the multiply unnamed (TPU
    draw 31). Through a fusion's parameters to its call site's operands."""
    callers = _fusion_callers(module)
    for op in ops:
        if not op.op_name and not op.named and op.inst.operands and \
                _reads_the_recompute(module, op, op_names, callers):
            op.named = op.marked = op.inherited = True


# Ops that write a value into a stack: a scan's forward saving its residuals or carries.
STACKING = frozenset({"concatenate", "dynamic-update-slice"})


def recomputes_named_in_transpose(module: Module, ops: list[SiteOp], op_names: OpNames) -> None:
    """After optimization, an elementwise op named in a checkpoint's transpose (outside its
    `rematted_computation`) that reads a constant and otherwise the recompute's values alone is
    the recompute's: the constant stands where the cotangent was, folded (softmax's `ct / s` with
    `ct = 1` is `1 / s`), and CSE merged the op with the recompute's op of the same value, which
    took the backward's name (base draw 82: the recompute of `1 / s` named `checkpoint/div`,
    divide -128). Not an op of recomputed values alone: jax evaluates some of the linearization's
    coefficients in the transpose (softmax's `p / s` for the derivative of `1 / s`, TPU draw 54),
    and the program without remat does too; nor its broadcasts and collectives of residuals (a
    weight's all-gather again under FSDP), nor what reads a forward value too. In the program
    without remat the backward's op merges with the forward's where it reads the forward's own
    value: only where every forward op of its signature and name runs in its frame, and the
    forward stacks nothing there. A scan's backward reads its residuals from the stack its forward saves (another loop
    body, or, unrolled, a concatenate in the same frame): the program without remat computes
    `1 / s` there again too, and nothing is marked (base draw 106, an unrolled scan: divide
    +256 where the op was marked)."""
    if not module.is_scheduled:
        return
    callers = _fusion_callers(module)
    candidates = [op for op in ops if op.op_name and not op.named and op.inst.operands
                  and op.inst.opcode in ELEMENTWISE_FLOP_OPCODES and _in_checkpoint_transpose(op.op_name)
                  and _reads_the_recompute(module, op, op_names, callers, only=True)]
    if not candidates:
        return
    shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
    forward: dict[tuple, list[SiteOp]] = {}
    stacking: set[str] = set()  # frames where the forward stacks values (a scan's residuals)
    for op in ops:
        if not op.marked and op.op_name and phase(op.op_name) != "backward":
            forward.setdefault(signature(op, shapes), []).append(op)
            if op.inst.opcode in STACKING and phase(op.op_name) == "forward":
                stacking.add(op.frame)
    for op in candidates:
        tail = inner_tail(op.op_name)
        twins = [twin for twin in forward.get(signature(op, shapes), ()) if ends_with(twin.op_name, tail)]
        if twins and op.frame not in stacking and all(twin.frame == op.frame for twin in twins):
            op.named = op.marked = op.inherited = True


def _fusion_callers(module: Module) -> dict[str, tuple[str, Instruction] | None]:
    """Each fused computation's one call site (None where several fusions call it)."""
    callers: dict[str, tuple[str, Instruction] | None] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                callers[callee] = None if callee in callers else (comp.name, inst)
    return callers


def _reads_the_recompute(module: Module, op: SiteOp, op_names: OpNames,
                         callers: Mapping[str, tuple[str, Instruction] | None], only: bool = False) -> bool:
    """Does the op read a remat-named value and otherwise (constants aside) only remat-named or
    forward values? `only`: a constant (broadcast or not) and remat-named values, nothing else.
    Through a fusion's parameters to its call site's operands."""
    comp = module.by_name[op.key[0]]
    sources: list[tuple[str, Instruction]] = []
    for name in op.inst.operands:
        source = comp.by_name.get(name)
        if source is not None and source.opcode == "parameter" and callers.get(comp.name):
            caller_comp, site = callers[comp.name]
            number = int(source.attributes.get("parameter_number", "0"))
            outer = module.by_name[caller_comp].by_name.get(site.operands[number]) \
                if number < len(site.operands) else None
            sources.append((caller_comp, outer) if outer is not None else (comp.name, source))
        elif source is not None:
            sources.append((comp.name, source))
    constant = [i.opcode == "constant" or (only and _constant_here(module.by_name[c], i.name)) for c, i in sources]
    if only and not any(constant):
        return False
    names = [name for (c, i), k in zip(sources, constant) if not k
             for name in _passed_on_names(module, c, i, op_names, callers)]
    remat = [REMAT_SCOPE in name for name in names]
    return any(remat) and all(r or (not only and (name is _INPUT or phase(name) == "forward"))
                              for r, name in zip(remat, names))


# What `_passed_on_names` gives for a parameter of the entry computation: a program input (a
# weight, a batch), which the recompute reads as the forward does, and never a gradient.
_INPUT = "<input>"


def _passed_on_names(module: Module, comp_name: str, inst: Instruction, op_names: OpNames,
                     callers: Mapping[str, tuple[str, Instruction] | None], depth: int = 16,
                     seen: set | None = None) -> list[str]:
    """The op_name of a value, or where XLA left the op that produced it without one (the
    converts, bitcasts and copies it adds around a bf16 library dot, and their fusion), the
    names of the named ops it passes on: looked for through its operands, into a fusion from its
    root and out of one from a parameter to the call site's operand (seed 83: a recompute's
    attention scores read `convert(convert(query + bias))`, the add remat-named, the two converts
    and their fusion unnamed)."""
    if inst.opcode == "parameter" and comp_name == module.entry.name:
        return [_INPUT]
    name = op_names.of(comp_name, inst)
    seen = set() if seen is None else seen
    if name or depth == 0 or (comp_name, inst.name) in seen:
        return [name]
    seen.add((comp_name, inst.name))
    comp = module.by_name[comp_name]
    if inst.opcode == "fusion":
        callee = module.by_name.get(inst.called(CallRole.FUSION)[0]) if inst.called(CallRole.FUSION) else None
        return _passed_on_names(module, callee.name, callee.root, op_names, callers, depth - 1, seen) \
            if callee is not None and callee.instructions else [name]
    if inst.opcode == "parameter":
        caller = callers.get(comp_name)
        number = int(inst.attributes.get("parameter_number", "0"))
        if caller is None or number >= len(caller[1].operands):
            return [name]
        outer = module.by_name[caller[0]].by_name.get(caller[1].operands[number])
        if outer is None:
            return [name]
        return _passed_on_names(module, caller[0], outer, op_names, callers, depth - 1, seen)
    found = [n for o in inst.operands if o in comp.by_name and comp.by_name[o].opcode != "constant"
             for n in _passed_on_names(module, comp_name, comp.by_name[o], op_names, callers, depth - 1, seen)]
    return found or [name]


def named_by_users(module: Module, ops: list[SiteOp], op_names: OpNames, sizes: Counter) -> None:
    """An op without metadata (a CPU library fusion's dot) that computes a value the program also
    computes elsewhere, and whose every user is remat-named, is that value's recompute: only the
    recompute reads it (seed 100: under `dots_with_no_batch_dims_saveable` the recompute's
    attention scores read only the saved query and key, forward values, so `inherit_names`
    cannot tell them from the forward's scores; the forward's feed the forward's softmax). A
    fused computation's root is read by its fusion's users."""
    # Dots and convolutions only: an unnamed cheap op read only by the recompute may be a fusion's
    # copy of the forward's (`fusion_copies` decides those).
    candidates = [op for op in ops if not op.op_name and not op.named and sizes[op.exact] > 1
                  and op.inst.opcode in MATMUL_OPCODES]
    # XLA splits a long reduction into a windowed partial reduction and a reduce of the partial
    # results (`TreeReductionRewriter`: a layer norm's `sum(x)` over 128 elements as a
    # reduce-window of 32 and a reduce of 4), and leaves the reduce-window without an op_name.
    # It is the first half of its reduce, whatever its value: where every reader is a remat-named
    # reduce it is that recompute's, also where it reads what no forward op reads (a recompute's
    # `sum(x)` of the saved stack's slice, which `inherit_names` cannot name: base seeds 16, 76,
    # reduce-window -3,968).
    split = [op for op in ops if not op.op_name and not op.named and op.inst.opcode == "reduce-window"]
    if not candidates and not split:
        return
    users: dict[Key, list[Instruction]] = {}
    callers: dict[str, tuple[str, Instruction] | None] = {}
    for comp, inst in module.instructions():
        for operand in inst.operands:
            users.setdefault((comp.name, operand), []).append(inst)
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                callers[callee] = None if callee in callers else (comp.name, inst)
    for op in candidates:
        where, readers = _readers(module, op.key[:2], users, callers)
        if readers and all(REMAT_SCOPE in op_names.of(where, reader) for reader in readers):
            op.named = op.marked = op.inherited = True
    for op in split:
        where, readers = _readers(module, op.key[:2], users, callers)
        if readers and all(REMAT_SCOPE in op_names.of(where, reader) and _is_reduce(module, reader)
                           for reader in readers):
            op.named = op.marked = op.inherited = True


def _readers(module: Module, key: Key, users: Mapping[Key, list[Instruction]],
             callers: Mapping[str, tuple[str, Instruction] | None]) -> tuple[str, list[Instruction]]:
    """The instructions reading an op's value, and their computation: a fused computation's
    root is read by its fusion's users."""
    where, name = key
    readers = users.get((where, name), [])
    if not readers and module.by_name[where].root.name == name and callers.get(where):
        where, site = callers[where]
        readers = users.get((where, site.name), [])
    return where, readers


def _is_reduce(module: Module, inst: Instruction) -> bool:
    """A reduce, or a fusion whose root is one (CPU wraps a lone reduce in a fusion)."""
    if inst.opcode == "reduce":
        return True
    callees = inst.called(CallRole.FUSION) if inst.opcode == "fusion" else ()
    return len(callees) == 1 and callees[0] in module.by_name and module.by_name[callees[0]].root.opcode == "reduce"


def casts_in_checkpoint_transpose(module: Module, ops: list[SiteOp], op_names: OpNames, sizes: Counter) -> None:
    """An unnamed convert that casts again a value the program casts elsewhere from something
    else than the checkpoint's transpose, reading only what that transpose rule emitted (op_name
    `.../transpose(...)/remat2`: the checkpoint's inputs as its backward re-reads them), is work
    only the program with remat runs. Seed 20 (bf16 weights, `scan(unroll=True)`): the forward's
    dot reads `bitcast(convert(w))`, the backward's `convert(bitcast(w))` of the same weight slice,
    which the checkpoint's transpose sliced again; without remat the backward reads the forward's
    cast. Where every copy reads that rule's output (a whole-model checkpoint's saved activations,
    seed 145), nothing tells which copy the other program runs: left alone. A program without remat
    has no `remat2` frame, so this marks nothing there.

    Also a cast of a program input (a weight, through reshapes) that, reshaped alone, only
    the checkpoint's transpose reads (readers named `transpose(...)/.../checkpoint/...`): the cast
    is part of the checkpointed function, so its backward casts the weight again, while without
    remat the backward reads the forward's cast of the same input. XLA may name the reshape
    after the input (`params['w1']`, base draw 103: `convert(bitcast(w))` read by the backward's
    dots only, convert -16,384) rather than `remat2`.

    Neither is a cast of a weight its own fusion transposes (`_transposed_in_place`, `MOVING`):
    the backward dot's transposed copy of the weight, which the program without remat builds as
    well. A saved activation's transposed cast under `remat2` stays (`_reads_an_input`)."""
    callers = _fusion_callers(module)
    users: dict[Key, list[Instruction]] = {}
    for comp, inst in module.instructions():
        for operand in inst.operands:
            users.setdefault((comp.name, operand), []).append(inst)
    by_value: dict[object, list[tuple[SiteOp, bool]]] = {}
    for op in ops:
        if op.op_name or op.named or op.inst.opcode != "convert" or sizes[op.exact] < 2:
            continue
        comp = module.by_name[op.key[0]]
        names = [name for o in op.inst.operands if o in comp.by_name
                 for name in _passed_on_names(module, comp.name, comp.by_name[o], op_names, {})]
        again = bool(names) and all(name.rsplit("/", 1)[-1] == "remat2" and phase(name) != "forward"
                                    for name in names) \
            and not (_transposed_in_place(comp, op.inst) and _reads_an_input(module, op, callers))
        if not again and _casts_an_input(module, op, callers):
            readers = _value_readers(module, op, users, callers)
            again = bool(readers) and all(_in_checkpoint_transpose(op_names.of(where, reader))
                                          for where, reader in readers)
        by_value.setdefault(op.exact, []).append((op, again))
    for copies in by_value.values():
        if not all(again for _, again in copies):
            for op, again in copies:
                if again:
                    op.named = op.marked = op.inherited = True


# Ops that only reshape a value, keeping its elements in their order. Not a transpose or a
# copy: a weight's transposed copy for the backward's dot, with the cast fused in, runs in the
# program without remat too (base draw 77, a whole-model checkpoint: convert +4,096 where they
# counted).
MOVING = frozenset({"bitcast", "reshape"})


def _transposed_in_place(comp: Computation, inst: Instruction) -> bool:
    """Does the cast's own computation transpose its value (through reshapes): a weight's
    transposed copy for the backward's dot, the cast fused in? The program without remat's
    backward builds that copy too, casting the weight slice again in it (held-out base 151,
    `dots_saveable`: its recompute reads no weight, and the transposed cast of each attention
    projection is in both programs, convert +5,120 where it counted)."""
    pending, seen = [inst.name], set()
    while pending:
        for reader in comp.users.get(pending.pop(), ()):
            if reader.name in seen:
                continue
            seen.add(reader.name)
            if reader.opcode == "transpose":
                return True
            if reader.opcode in MOVING:
                pending.append(reader.name)
    return False


# Ops that take a program input's elements as they are or narrow and widen them: a slice of a
# stacked weight, cast for the slice (`convert(slice(convert(w)))`), is still the weight.
_OF_INPUT = MOVING | {"slice", "convert", "copy"}


def _reads_an_input(module: Module, op: SiteOp, callers: Mapping[str, tuple[str, Instruction] | None]) -> bool:
    """Does the convert read a program input (an entry parameter: a weight), through views,
    slices and casts, into fusions from their root and out of them to their call site's operand?
    Not an activation the forward computed (held-out more 214, a saved bf16 activation's
    transposed cast under `remat2` is the recompute's: the program without remat reads it wide)."""
    return _from_program_input(module, op, callers, _OF_INPUT, into_fusions=True, steps=32)


def _casts_an_input(module: Module, op: SiteOp, callers: Mapping[str, tuple[str, Instruction] | None]) -> bool:
    """Does the convert read an entry parameter (a program input), through reshapes and out of
    fusions to their call site's operand?"""
    return _from_program_input(module, op, callers, MOVING, into_fusions=False, steps=16)


def _from_program_input(module: Module, op: SiteOp, callers: Mapping[str, tuple[str, Instruction] | None],
                        through: frozenset[str], into_fusions: bool, steps: int) -> bool:
    """Does the op's operand come from an entry parameter, through single-operand ops of `through`,
    out of fusions to their call site's operand and (`into_fusions`) into a fusion from its root?"""
    if len(op.inst.operands) != 1:
        return False
    where, inst = op.key[0], module.by_name[op.key[0]].by_name.get(op.inst.operands[0])
    for _ in range(steps):
        if inst is None:
            return False
        if inst.opcode == "parameter":
            if where == module.entry.name:
                return True
            caller, number = callers.get(where), int(inst.attributes.get("parameter_number", "0"))
            if caller is None or number >= len(caller[1].operands):
                return False
            where, inst = caller[0], module.by_name[caller[0]].by_name.get(caller[1].operands[number])
        elif into_fusions and inst.opcode == "fusion" and len(inst.called(CallRole.FUSION)) == 1:
            callee = module.by_name.get(inst.called(CallRole.FUSION)[0])
            if callee is None or callee.root is None:
                return False
            where, inst = callee.name, callee.root
        elif inst.opcode in through and len(inst.operands) == 1:
            inst = module.by_name[where].by_name.get(inst.operands[0])
        else:
            return False
    return False


def _value_readers(module: Module, op: SiteOp, users: Mapping[Key, list[Instruction]],
                   callers: Mapping[str, tuple[str, Instruction] | None]) -> list[tuple[str, Instruction]]:
    """The instructions reading the op's value, through reshapes and out of a fusion whose root
    it is (empty where something else reads it on the way, or an op of its own fusion does: a
    widen inside a fusion is float normalization's, hloflops.remat.normalization decides it)."""
    found: list[tuple[str, Instruction]] = []
    stack = [(op.key[0], op.inst)]
    while stack:
        where, inst = stack.pop()
        readers = users.get((where, inst.name), [])
        if module.by_name[where].root.name == inst.name:
            if readers or not callers.get(where):
                return []
            where, site = callers[where]
            stack.append((where, site))
            continue
        for reader in readers:
            if reader.opcode in MOVING:
                stack.append((where, reader))
            elif where in callers:
                return []
            else:
                found.append((where, reader))
    return found
