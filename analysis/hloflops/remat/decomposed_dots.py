"""The product half of a dot XLA decomposed into a multiply and a reduce: unsure with its reduce
(hloflops.remat.pairing adds `decomposed_dot_products` to the range's hinges).

XLA's algebraic simplifier rewrites a dot with a vector operand (dot strength reduction: a
matrix-vector product, `[k] x [k, n]`) as an elementwise multiply of the broadcast vector with the
matrix and a reduce over the contracted dimension, fused together. The reduce keeps the dot's
op_name (`.../dot_general`), the multiply none, so the rules that decide the reduce (a recompute
paired by value or signature, or a hinge where the pairing is unsure) cannot see that the multiply
is the same dot's other half. Where the reduce is a hinge, its multiply is one too: the two run
together or not at all (TPU draw utpu 191, an MLP checkpointed whole under tensor parallelism: each
layer's matrix-vector dots decomposed, three recomputed reduces unsure and their multiplies model
FLOPs, sure, multiply -16,260 and the truth above the high end)."""

from __future__ import annotations

from typing import Iterable

from hloparse.ir import Module

Key = tuple[str, str]


def decomposed_dot_products(module: Module, reduces: Iterable[Key]) -> set[Key]:
    """Of the reduces `reduces` (computation, name), the multiplies each reads as its operand in
    its computation that carry no op_name and feed nothing else: the dot's product half."""
    wanted: dict[str, set[str]] = {}
    for comp_name, name in reduces:
        wanted.setdefault(comp_name, set()).add(name)
    found: set[Key] = set()
    for comp_name, names in wanted.items():
        comp = module.by_name.get(comp_name)
        if comp is None:
            continue
        users: dict[str, int] = {}
        for inst in comp.instructions:
            for operand in inst.operands:
                users[operand] = users.get(operand, 0) + 1
        for name in names:
            reduce = comp.by_name.get(name)
            if reduce is None or reduce.opcode != "reduce" or len(reduce.operands) != 2:
                continue
            product = comp.by_name.get(reduce.operands[0])
            if product is not None and product.opcode == "multiply" and users.get(product.name) == 1 \
                    and not product.op_name:
                found.add((comp_name, product.name))
    return found

