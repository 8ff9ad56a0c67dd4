"""Ops of a loop body that a trip XLA peeled off the loop no longer computes (a range hinge).

XLA may peel a loop's trip off into the computation around it: the trip then runs once beside a
loop of one trip fewer, and what that copy computes only for the loop's state, which nothing
after the loop reads, is dead there and pruned. A scan's backward loop carries each layer's input
gradient to the next trip; layer 0's, computed by its last trip, nothing reads (the scan's input is
not differentiated), so a peeled last trip drops that matmul (held-out TPU 91: a batch of one row,
the matmul an elementwise multiply and a reduce, and the gradient's accumulation add; ntpu 173).
The program without remat runs its loop whole where XLA did not peel it, every trip computing the
carried gradient, and whether it peels rests on how XLA compiled that program: in every TPU draw
checked only the program with remat peeled (an offloading policy on a sharded mesh), but nothing in
this program says its twin did not. So each body op the peeled trip lacks is a hinge: the program
without remat may run it once more per execution of the loop (the range's low end), never a count.

A peeled trip is the loop's ops named under the loop's name (`.../while/body/...`) in the
computation that runs the loop, through its fusions and calls; it is taken for one where it holds
at least as many of the body's ops as it lacks, and at least one matmul-like op of it (a reduce or
a matmul): hoisting a loop-invariant op out of a loop leaves its name outside too, but no trip."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from hloflops.loops.tripcount import trip_count
from hloflops.remat.op_kinds import unit_free_shape
from hloparse.ir import CallRole, Computation, Instruction, Module

# Ops that compute no FLOPs of their own (views, data movement, structure): never a hinge.
_NO_FLOPS = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape", "transpose",
    "copy", "broadcast", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad",
    "fusion", "call", "while", "conditional", "iota", "copy-start", "copy-done", "custom-call",
    "all-gather", "all-gather-start", "all-gather-done", "collective-permute", "async-start",
    "async-update", "async-done", "opt-barrier", "after-all", "partition-id", "replica-id",
    "get-dimension-size", "bitcast-convert", "gather", "scatter", "send", "recv", "send-done",
    "recv-done", "reverse",
})
# Ops that show a trip's work was copied out, not only a loop invariant hoisted.
MATMUL_LIKE = frozenset({"dot", "convolution", "reduce"})


def peeled_iteration_drops(module: Module) -> dict[tuple[str, str], int]:
    """The body ops (computation, name) that a peeled trip of their loop lacks, each with the
    loop's trip count here: the program without remat may run the op once more per execution of
    the loop, a trip's FLOPs of it (module docstring)."""
    found: dict[tuple[str, str], int] = {}
    for comp, inst in module.instructions():
        if inst.opcode != "while":
            continue
        bodies = inst.called(CallRole.WHILE_BODY)
        prefix = loop_scope(module, module.by_name[bodies[0]]) if bodies else None
        if prefix is None:
            continue
        body_ops = list(trip_ops(module, module.by_name[bodies[0]], prefix, None, inst.name))
        if not body_ops:
            continue
        peeled = Counter(signature for signature, _ in trip_ops(module, comp, prefix, None, inst.name))
        lacked = []
        matched = Counter()
        for signature, key in body_ops:
            if peeled[signature] > matched[signature]:
                matched[signature] += 1
            else:
                lacked.append(key)
        held = sum(matched.values())
        if not lacked or held < len(lacked) or not any(sig[0] in MATMUL_LIKE for sig in matched):
            continue
        trips = trip_count(module, comp, inst).value
        if not trips:
            continue
        for key in lacked:
            found[key] = trips
    return found


def loop_scope(module: Module, body: Computation) -> str | None:
    """The name scope of a loop's body (`.../while/body/`), the one most of its ops' names hold up
    to their last loop body (XLA's optimized while carries no name of its own)."""
    scopes: Counter = Counter()
    pending, seen = [body], set()
    while pending:
        comp = pending.pop()
        for inst in comp.instructions:
            op_name = inst.metadata.get("op_name") or ""
            at = op_name.rfind(BODY)
            if at >= 0:
                scopes[op_name[:at + len(BODY)]] += 1
            for callee in inst.called(CallRole.FUSION) + inst.called(CallRole.CALL):
                if callee not in seen:
                    seen.add(callee)
                    pending.append(module.by_name[callee])
    return scopes.most_common(1)[0][0] if scopes else None


BODY = "/while/body/"


def trip_ops(module: Module, comp: Computation, prefix: str, inherited: str | None, loop: str
         ) -> Iterator[tuple[tuple, tuple[str, str]]]:
    """The FLOP-computing ops named under `prefix` in a computation and its fusions, calls and the
    bodies of loops it runs (not `loop`, the peeled loop itself), each with its signature (opcode,
    shape without unit dimensions, its name below the prefix): an op without a name of its own takes
    its fusion's for the prefix. A trip's windowed einsum runs as a loop of its own inside the trip
    (a tensor-parallel matmul, window by window), so a peeled trip that drops the layer's input
    gradient drops that whole inner loop (xtpu 418, ytpu 474: its convolution; xtpu 404: its
    multiply and reduce)."""
    for inst in comp.instructions:
        op_name = inst.metadata.get("op_name") or ""
        if inst.opcode in ("fusion", "call") or (inst.opcode == "while" and inst.name != loop):
            for callee in inst.called(CallRole.FUSION) + inst.called(CallRole.CALL) \
                    + inst.called(CallRole.WHILE_BODY):
                yield from trip_ops(module, module.by_name[callee], prefix, op_name or inherited, loop)
            continue
        if inst.opcode in _NO_FLOPS or not _counts(inst):
            continue
        scope = op_name or inherited or ""
        if not scope.startswith(prefix):
            continue
        yield (inst.opcode, unit_free_shape(inst.shape), op_name[len(prefix):] if op_name else ""), \
            (comp.name, inst.name)


def _counts(inst: Instruction) -> bool:
    """Not a scalar's op (the loop's own counter and index arithmetic, which XLA rewrites when it
    peels a trip)."""
    return bool(getattr(inst.shape, "dims", ()))
