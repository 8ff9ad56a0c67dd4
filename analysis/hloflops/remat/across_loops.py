"""Which of the cheap recomputes paired with their forward in another loop body rest on how XLA
fused the two programs (hloflops.remat.pairing: such ops are hinges of `remat_flops_bounds`).

After optimization XLA copies a cheap elementwise value into every fusion that reads it: the
forward loop into its consumers, the backward loop's recompute into its own, and the program
without remat into its forward consumers and the fusions that save the value for the backward
(seed 98 of the `more` family, a layer norm's output: one forward copy and one recompute with
remat, two forward copies without). How many of the recompute's copies run because of remat
then depends on the program without remat's fusion. A copy is sure where the program without
remat can have no counterpart of it: an expensive op (never duplicated by fusion), what feeds a
recomputed expensive op, a value read only by the recompute itself (the input of the next
layer's recomputed matmul: the program without remat reads the forward's), and a chain that
reads two values as large as its own (silu's `h * sigmoid(h)` in seed 000: XLA stores such a
result rather than copy the chain into the fusion saving it, so the program without remat reads
its forward's value; the recompute's copy is one of its own), unless its fusion hands it out
reshaped (`_hands_out_reshaped`: XLA copies it into the saving fusion after all).

The same holds for the copies of a value whose every copy is remat-marked, counted against the
forward's copies found by signature and name in another loop body (`ForwardTwins`): the program
without remat's forward loop is fused otherwise than this one's (it saves residuals this program
recomputes, materializes what they are computed from, and copies cheap producers into each of
those fusions), so how many copies run because of remat rests on fusion too. Such a copy is
counted by the class's number, not by the fusion it sits in, so the last exemption above is not
its own: more seeds 33, 37, 69, 148 (gelu MLPs in `nnx.scan` and `hk.layer_stack`, two of them
under offload policies) copy the bias add and `1 + tanh` into the recompute's gelu product fusion
and count them sure, where the program without remat copies the bias add into four fusions of
its forward and this program into one: add +3,072 to +98,304, now inside the range."""

from __future__ import annotations


from hloflops.remat.fusion_copies import feeding_marked_expensive, fused_outputs
from hloflops.remat.op_kinds import EXPENSIVE, largest_array
from hloparse.ir import CallRole, Module
from hloflops.remat.sites import Key, SiteKey, SiteOp


# Readers that only hand a value on: their own readers are the value's.
_HANDS_ON = frozenset({"bitcast", "get-tuple-element", "reshape", "copy", "transpose", "tuple"})


def _reads_two_whole_values(module: Module, site: Key) -> bool:
    """Does the instruction read two values as large as its own (a gelu product of `h` and its
    tanh's fusion, silu's `h * sigmoid(h)`)? XLA does not copy such a chain into the fusion that
    saves its value (it would read two values to store one): the program without remat stores the
    forward's result, and the recompute's copy is one of its own."""
    comp = module.by_name[site[0]]
    inst = comp.by_name[site[1]]
    size = largest_array(inst.shape)
    whole = [name for name in inst.operands if name in comp.by_name and largest_array(comp.by_name[name].shape) >= size]
    return len(whole) >= 2


def _hands_out_reshaped(module: Module, site: Key) -> bool:
    """Is the instruction a fusion whose root is a bitcast or reshape (a `[batch, tokens, features]`
    value handed out flattened, as a matmul's operand)? Then the forward's value, too, reaches its
    matmul through a reshape, and XLA's fusion sees only fusible consumers (the reshape, the fusion
    saving the value): it copies the chain into both, two whole operands or not (more seed 126,
    gelu's `(0.5 * h) * (1 + t)`: the program without remat computes it in the fusion flattening
    it for the next matmul and again in the fusion saving it). Where the matmul reads the value
    as it is (silu's `h * sigmoid(h)` of seed 000, two-dimensional), the matmul cannot fuse it
    and XLA stores it once."""
    comp = module.by_name[site[0]]
    inst = comp.by_name[site[1]]
    if inst.opcode != "fusion":
        return False
    callees = inst.called(CallRole.FUSION)
    return len(callees) == 1 and callees[0] in module.by_name and \
        module.by_name[callees[0]].root.opcode in ("bitcast", "reshape")


def resting_on_fusion(module: Module, ops: list[SiteOp], across: set[SiteKey], remat: set[SiteKey],
                      cheap: frozenset[str], counted: set[SiteKey] = frozenset()) -> set[SiteKey]:
    """The ops of `across` (recomputes paired with an op of another frame) and of `counted` (copies
    of a class counted against its forward's copies in another frame, `ForwardTwins`) of a `cheap`
    opcode that are not sure (see the module docstring). A counted copy is the class's by number,
    not by the fusion it sits in: one inside a fusion reading two whole values (a gelu product's)
    may stand for a copy elsewhere, and that exemption is not its own."""
    candidates = [op for op in ops if (op.key in across or op.key in counted) and op.key in remat
                  and op.inst.opcode in cheap and op.inst.opcode not in EXPENSIVE]
    if not candidates or not module.is_scheduled:
        return set()
    fused = fused_outputs(module)
    feeds_expensive = feeding_marked_expensive(module, fused, {op.key[:2] for op in ops if op.marked})
    recompute = {key[:2] for key in remat}
    recomputing = {name for name in fused if any((name, inst.name) in recompute
                                                 for inst in module.by_name[name].instructions)}
    sites: dict[str, Key] = {}
    readers: dict[Key, list] = {}
    for comp, inst in module.instructions():
        for operand in inst.operands:
            readers.setdefault((comp.name, operand), []).append(inst)
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                sites[callee] = (comp.name, inst.name)

    def read_only_by_recompute(key: Key) -> bool:
        comp_name = key[0]
        pending, seen, found = [key[1]], set(), False
        while pending:
            for reader in readers.get((comp_name, pending.pop()), ()):
                if reader.name in seen:
                    continue
                seen.add(reader.name)
                if reader.opcode in _HANDS_ON:
                    pending.append(reader.name)
                elif (comp_name, reader.name) in recompute or \
                        any(callee in recomputing for callee in reader.called(CallRole.FUSION)):
                    found = True
                else:
                    return False
        return found

    out: set[SiteKey] = set()
    for op in candidates:
        if op.key[:2] in feeds_expensive:
            continue
        site = sites.get(op.key[0]) if op.key[0] in fused else op.key[:2]
        if site is not None and (read_only_by_recompute(site) or
                                 (op.key in across and _reads_two_whole_values(module, site)
                                  and not _hands_out_reshaped(module, site))):
            continue
        out.add(op.key)
    return out
