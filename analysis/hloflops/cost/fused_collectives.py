"""Collectives that TPU compiles into fusions, and what each copy really sends.

A TPU module prints one collective several times when it runs it asynchronously: XLA's TPU
backend splits it into an `AsyncCollectiveStart` fusion (the collective, then a custom-call
`AsyncCollectiveStart` on its result), continuation fusions that overlap it with other work (a
copy of the collective inside each, its backend_config holding `async_collective_fusion_config`
and the fusion's holding `continuation_config`), and an `AsyncCollectiveDone` fusion (another
copy, then the custom-call). The data moves once: the start's copy is charged, the continuation
and done copies send nothing. A reduce-scatter may also be printed as an `all-reduce-scatter`
fusion: an all-reduce whose result each device slices to its own 1/n (`dynamic-slice` at the
root); ring-wise that is a reduce-scatter, (n-1)/n of the input, not an all-reduce's 2(n-1)/n.

Any other collective inside a TPU fusion is of a kind this module does not know: its bytes are
reported as unknown, naming the fusion computation, never counted as 0 or as a plain collective.
(Outside TPU modules a fused collective is charged as itself: GPU's Triton collective fusions run it.)
"""

from __future__ import annotations

from dataclasses import dataclass

from hloflops.cost.tpu import is_tpu_module
from hloparse.ir import Computation, Instruction, Module

START, DONE = "AsyncCollectiveStart", "AsyncCollectiveDone"
COLLECTIVES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all", "collective-permute",
    "collective-broadcast", "all-reduce-start", "all-gather-start", "collective-permute-start",
})


@dataclass(frozen=True, slots=True)
class FusedRole:
    """How one collective inside a fusion body is charged."""

    kind: str  # "async start", "async copy", "reduce-scatter" or "unknown"
    why: str


def _targets(comp: Computation) -> set[str]:
    return {inst.custom_call_target or "" for inst in comp.instructions if inst.opcode == "custom-call"}


def _slices(comp: Computation, inst: Instruction) -> list[tuple[Instruction, Instruction]] | None:
    """(result leaf, dynamic-slice of it) for each leaf of an all-reduce whose every use is a
    dynamic-slice the fusion returns (the root, or an operand of a root tuple), through a
    get-tuple-element where the all-reduce is combined (one op, several arrays); None otherwise."""
    if inst.opcode != "all-reduce":
        return None
    root = comp.root
    returned = set(root.operands) if root.opcode == "tuple" else {root.name}
    users = comp.users
    leaves = list(users.get(inst.name, ())) if inst.shape.is_tuple else [inst]
    if not leaves or (inst.shape.is_tuple and any(u.opcode != "get-tuple-element" for u in leaves)):
        return None
    pairs = []
    for leaf in leaves:
        used = users.get(leaf.name, ())
        if len(used) != 1 or used[0].opcode != "dynamic-slice" or used[0].name not in returned:
            return None
        pairs.append((leaf, used[0]))
    return pairs


def reduce_scatter_parts(comp: Computation, inst: Instruction) -> int | None:
    """Into how many parts an all-reduce-scatter fusion's slices cut each result (the same for
    every leaf), or None where the all-reduce is not one."""
    pairs = _slices(comp, inst)
    if not pairs:
        return None
    parts = set()
    for leaf, piece in pairs:
        whole, part = leaf.shape.num_elements, piece.shape.num_elements
        if part <= 0 or whole % part or whole == part:
            return None
        parts.add(whole // part)
    return parts.pop() if len(parts) == 1 else None


def fused_roles(module: Module) -> dict[tuple[str, str], FusedRole]:
    """(computation, instruction) -> role, for every collective inside a fusion body of a TPU
    module. Elsewhere a fused collective is the collective itself (GPU's Triton collective
    fusions, XLA's test modules), charged as it stands: {}."""
    roles: dict[tuple[str, str], FusedRole] = {}
    if not is_tpu_module(module):
        return roles
    for comp in module.computations:
        if not comp.is_fusion_body:
            continue
        collectives = [inst for inst in comp.instructions if inst.opcode in COLLECTIVES]
        if not collectives:
            continue
        targets = _targets(comp)
        for inst in collectives:
            key = (comp.name, inst.name)
            if START in targets:
                roles[key] = FusedRole("async start", "sent here: an async collective's AsyncCollectiveStart fusion")
            elif DONE in targets or "async_collective_fusion_config" in (inst.attributes.get("backend_config") or ""):
                roles[key] = FusedRole("async copy", "a copy of an async collective whose start fusion sends")
            elif reduce_scatter_parts(comp, inst) is not None:
                roles[key] = FusedRole("reduce-scatter", "all-reduce-scatter fusion: each device keeps 1/n")
            else:
                roles[key] = FusedRole("unknown", f"{inst.opcode} fused into {comp.name}, a fusion of a kind "
                                                  "hloflops does not know: bytes sent unknown")
    return roles
