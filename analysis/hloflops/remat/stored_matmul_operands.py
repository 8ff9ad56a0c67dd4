"""A matmul operand the twin may store: the recompute's copies nested in gradient matmuls, and the
forward's beyond one, are a hinge (hloflops.remat.fusion_copies puts them among its stand-ins).

TPU nests a cheap chain feeding a matmul (a layer norm's `(x - mean) * rsqrt(var) * g + b`) as a
loop fusion inside the matmul's output fusion, once per matmul reading it. Under a policy that saves
the dots, the program with remat never materializes the chain: its forward nests it into each
forward matmul reading it (a block's query, key and value projections), and its recompute into
each weight gradient's fusion. Without remat the chain's value is a residual the weight gradients
read, and XLA chooses between two fusions this program cannot show: nest it again into every
reader, forward and gradient alike (TPU draws 157 and 220: the twin computes a block's first layer
norm 7 times, 3 forward + 3 gradient matmuls + the norm's gradient, as this program's forward and
recompute together do), or materialize it once, narrowed to bf16 (a DEFAULT-precision matmul
rounds its operand to bf16 anyway), and have all six matmuls read that store (TPU draw 182: the twin
computes it twice, the store and the norm's gradient, against this program's seven). In the first
case the nested copies are model FLOPs (`_nested_in_gradient_matmuls`), in the second the
recompute's nested copies and the forward's beyond the one the store stands for run because of
remat. Scanning TPU draws 0-299 for this shape (a value the forward nests into two or more matmul
fusions, never materialized, the recompute nesting it into gradient matmuls), both twins occur at
equal width and policy, so the shape is a hinge: reported as model FLOPs, the high end counts them.
A value the forward nests into one matmul only is left as it was: one store or one nested copy
costs the twin the same.
"""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Module


def stored_operand_hinges(module: Module, ops: list[SiteOp], homes: Mapping[str, str],
                          nested: set[SiteKey]) -> set[SiteKey]:
    """For each value some of whose recompute copies are in `nested` (nested in a gradient
    matmul's fusion, taken for model FLOPs), where the forward computes it only nested in the
    fusions of two or more matmuls (`homes`: nested fused computation -> its outermost fusion):
    those recompute copies and the forward's nested copies beyond the first."""
    if not nested:
        return set()
    matmul_homes = {home for home in set(homes.values())
                    if (comp := module.by_name.get(home)) is not None
                    and any(inst.opcode in MATMUL_OPCODES for inst in comp.instructions)}
    recompute: dict[object, list[SiteOp]] = {}
    forward: dict[object, list[SiteOp]] = {}
    materialized: set[object] = set()
    for op in ops:
        if op.key in nested:
            recompute.setdefault(op.exact, []).append(op)
        elif not op.marked:
            if homes.get(op.key[0]) in matmul_homes:
                forward.setdefault(op.exact, []).append(op)
            else:
                materialized.add(op.exact)  # the forward computes it outside a matmul's fusion too
    found: set[SiteKey] = set()
    for value, copies in recompute.items():
        readers = sorted(forward.get(value, ()), key=lambda op: op.order)
        if value in materialized or len({(homes[op.key[0]], op.key[2]) for op in readers}) < 2:
            continue
        found.update(op.key for op in copies)
        found.update(op.key for op in readers[1:])
    return found
