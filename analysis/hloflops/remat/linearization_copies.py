"""The linearization's own work among the copies hloflops.remat.fusion_copies decides: its
coefficients recomputed in a backward loop (and the values computed from them), and the fusions
computing nothing else, whose copies the program without remat makes in its forward."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.sites import SiteKey, SiteOp


def linearization_coefficients(ops: list[SiteOp], model: set[SiteKey]) -> tuple[set, set]:
    """The values only the recompute computes, named there by jax: `model` holds each one's copy
    counted as model FLOPs where `_same_value` (hloflops.remat.pairing) found no forward op of its
    value (nor `ForwardTwins` one of its signature and name in another frame). These are the
    linearization's coefficients, tanh's `1 - t` or sigmoid's `1 - s`, which the forward of a
    checkpointed block never computes. The program without remat computes such a coefficient in its
    forward, once, into the residual it saves, and its backward loop reads it stored; the program
    with remat recomputes it in its backward loop, where XLA copies it into each gradient fusion
    reading it. So all copies but the one counted as model FLOPs run because of remat, as
    `_same_value` paired them (base seeds 107 and 138, a BiLSTM whose four gate gradient fusions
    each copy the cell's `1 - tanh(c)`: subtract -24,736 and -49,168 before). A forward value's
    copies (gelu's `1 + tanh`) stay unsure: the program without remat may copy those into several of
    its saving fusions. Not a widen XLA left unnamed (float normalization's convert, one per fusion
    in both programs: hloflops.remat.widen_counts decides those).

    Returns those values, and those a named op computes from them in its fusion (sigmoid's
    `s * (1 - s)` reads `1 - s`), all copies remat-marked: the forward, which never computes the
    input, cannot compute them, whatever op of their signature and name `ForwardTwins` found there
    and `_same_value` counted them against (held-out base 221, a BiLSTM: the gate's `s * (1 - s)`,
    taken for the forward's `f * c`, multiply -24,576). The program without remat computes each of
    those once too: all copies but the first run because of remat."""
    found = {op.exact for op in ops if op.key in model and op.op_name and not op.inherited}
    if not found:
        return found, set()
    base = set(found)
    unmarked = {op.exact for op in ops if not op.marked}
    by_key = {op.key: op for op in ops}
    readers = [op for op in ops if op.named and op.op_name and not op.inherited
               and op.exact not in unmarked and op.exact not in found]
    grown = True
    while grown:
        grown = False
        for op in readers:
            if op.exact not in found and any(
                    (operand := by_key.get((op.key[0], name, op.key[2]))) is not None and operand.exact in found
                    and operand.inst.opcode not in _NO_WORK for name in op.inst.operands):
                found.add(op.exact)
                grown = True
    return base, found - base


# A coefficient's copies that compute nothing: jvp's broadcast constant (gelu's `3` in `3 * x**2`,
# whose `x**2` the forward computes too) says nothing of what reads it.
_NO_WORK = frozenset({"broadcast", "constant", "iota", "bitcast", "reshape", "copy"})


def copies_in(ops: list[SiteOp], values: set, frames: set[str]) -> dict[tuple, list[SiteOp]]:
    """The marked copies of each of `values` in each of `frames`."""
    copies: dict[tuple, list[SiteOp]] = {}
    if values and frames:
        for op in ops:
            if op.marked and op.exact in values and op.frame in frames:
                copies.setdefault((op.frame, op.exact), []).append(op)
    return copies


def only_linearization_outputs(comp_name: str, site: int, outputs: frozenset[str], by_key: Mapping[SiteKey, SiteOp],
                        own: set[SiteKey]) -> bool:
    """Whether every output of a fusion is the linearization's own work (`own`)."""
    keys = [key for key in ((comp_name, name, site) for name in outputs) if key in by_key]
    return bool(keys) and all(key in own for key in keys)


def coefficient_counts_passed_on(ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                                  by_key: Mapping[SiteKey, SiteOp], own: set[SiteKey], out: set[SiteKey],
                                  decided_copies: set[SiteKey], dropped: Mapping[tuple, int]) -> set[SiteKey]:
    """A recomputed cheap value copied into a fusion of only the linearization's own work (a layer
    norm's `var + eps`, read by rsqrt's coefficient `rsqrt(v) / v`) has that copy in the program
    without remat too, in the forward fusion computing the coefficient it saves; the forward with
    remat computes no coefficient and makes no such copy. So of the recompute's copies, the one in
    that fusion is model FLOPs, the others recompute (held-out base 265, a whole-model checkpoint:
    add and multiply +32). `_same_value` caps a value's recompute copies at its forward's count,
    picking which by order: where it picked the dropped copy, a sibling copy of the value (same
    frame) it left, outside such fusions and undecided by this rule, takes the count."""
    passed: set[SiteKey] = set()
    if not dropped:
        return passed
    left = dict(dropped)
    for op in sorted(ops, key=lambda o: o.order):
        group = (op.frame, op.exact)
        if not left.get(group) or not op.marked or op.key in out or op.key in decided_copies:
            continue
        outputs = fused.get(op.key[0])
        if outputs is not None and only_linearization_outputs(op.key[0], op.key[2], outputs, by_key, own):
            continue
        passed.add(op.key)
        left[group] -= 1
    return passed
