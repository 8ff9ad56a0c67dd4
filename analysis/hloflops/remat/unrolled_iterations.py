"""Ops of a layer loop XLA unrolled whole whose last copy no longer computes them (a range hinge).

The sibling of `peeled_iterations`: where XLA peels one trip off a scan's backward loop, that trip
drops the carried input gradient nothing after the loop reads (layer 0's; the scan's input is not
differentiated). A loop of few trips XLA may unroll whole instead: every trip is then a copy of the
body in the computation that ran the loop, no loop of that name is left, and the last copy drops
that gradient, with the windowed einsum loop computing it under tensor parallelism (xtpu 404: a
two-layer Haiku stack whose backward runs `linear`'s input-gradient window loop once against the
twin's loop running it on both trips, a multiply and a reduce of 2,032 each). The program without
remat may keep its loop, every trip computing the gradient, and nothing in this program says which
it did: so each op one copy short of the others is a hinge of one copy more (the range's low end),
never a count.

The copies are the ops named under a loop body's scope (`.../while/body/`) in the entry computation,
through its fusions, calls and the window loops it runs, where no layer loop of that scope is left
(a layer loop is named for its scan, `.../while`, or by nothing, its body's ops carrying the scope;
a window loop is named for its matmul). The number of copies is the most any matmul-like op (a dot,
a convolution or a reduce) of the scope has; an op with one copy fewer is the dropped one, taken
where a matmul-like op is one copy short and at least as many of them have every copy (an
elementwise op's name repeats within one copy, so only the matmuls count the copies), and where that
count is the layers of the stacks the unrolled copies slice statically (`unrolled_layer_loops`' sign
of an unrolled scan): two matmuls named and shaped alike within one layer are no copies (TPU 460, a
one-layer nnx scan of square weights). An unrolled
scan's dot or convolution one layer short that `unrolled_layer_loops` already hinges (its surviving
input gradients) is not counted again."""

from __future__ import annotations

from collections import Counter, defaultdict

from hloflops.remat.peeled_iterations import BODY, MATMUL_LIKE, loop_scope, trip_ops
from hloflops.remat.unrolled_layer_loops import pruned_input_gradients, unrolled_stack_slices
from hloparse.ir import CallRole, Module


# Collectives XLA's combiners merge across the copies (one all-reduce for two layers' gradients,
# xtpu 404): their count says nothing of a copy dropped.
_COMBINED = frozenset({"all-reduce", "all-reduce-start", "reduce-scatter", "all-to-all"})


def unrolled_iteration_drops(module: Module) -> dict[tuple[str, str], int]:
    """The ops (computation, name) of an unrolled layer loop that one copy of it lacks, each with 1:
    the program without remat may run the op once more (module docstring; the value is the divisor
    of the row's FLOPs that `RematIndex.twin_trips` takes)."""
    entry = module.entry
    if entry is None:
        return {}
    kept = _layer_loop_scopes(module)
    # The surviving input-gradient matmuls unrolled_layer_loops already hinges (a dot or a
    # convolution one layer short): those copies are counted there, not twice.
    layers = unrolled_stack_slices(module)[1]
    counted = pruned_input_gradients(module, layers)
    ops = list(trip_ops(module, entry, "", None, ""))
    scopes = Counter(sig[2][:sig[2].rfind(BODY) + len(BODY)] for sig, _ in ops if BODY in sig[2])
    found: dict[tuple[str, str], int] = {}
    for scope in scopes:
        if scope in kept:
            continue
        copies: dict[tuple, list[tuple[str, str]]] = defaultdict(list)
        for sig, key in trip_ops(module, entry, scope, None, ""):  # an unnamed op by its fusion's scope
            copies[sig].append(key)
        most = max((len(keys) for sig, keys in copies.items() if sig[0] in MATMUL_LIKE), default=0)
        if most < 2 or most != layers:  # two matmuls alike in one layer are no copies (nnx, TPU 460)
            continue
        # The copies' count rests on the matmuls (an elementwise op's name repeats within a copy).
        full = sum(1 for sig, keys in copies.items() if sig[0] in MATMUL_LIKE and len(keys) == most)
        if not full or full < sum(1 for sig, keys in copies.items()
                                  if sig[0] in MATMUL_LIKE and len(keys) == most - 1):
            continue
        if not any(sig[0] in MATMUL_LIKE and len(keys) == most - 1 for sig, keys in copies.items()):
            continue
        for sig, keys in copies.items():
            if len(keys) == most - 1 and sig[0] not in _COMBINED and counted.isdisjoint(keys):
                found[keys[0]] = 1  # one copy's FLOPs more: its row's own (every copy computes alike)
    return found


def _layer_loop_scopes(module: Module) -> set[str]:
    """The body scopes of the layer loops left in the module: a `while` named for its scan
    (`.../while`) or by nothing (its body's ops carry the scope); not a window loop (named for its
    matmul)."""
    scopes: set[str] = set()
    for _, inst in module.instructions():
        if inst.opcode != "while":
            continue
        if inst.op_name.endswith("/while"):
            scopes.add(inst.op_name + BODY[len("/while"):])
        elif not inst.op_name:
            bodies = inst.called(CallRole.WHILE_BODY)
            scope = loop_scope(module, module.by_name[bodies[0]]) if bodies else None
            if scope:
                scopes.add(scope)
    return scopes
