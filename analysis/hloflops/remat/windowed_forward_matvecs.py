"""A recompute's matrix-vector product whose forward XLA ran as a window loop: no value partner,
remat all the same (after optimization; TPU, tensor parallel; hloflops.remat.pairing calls
`with_windowed_forward_matvecs` on the finished index, before `with_matvec_multiplies`).

Where a batch row is one vector, TPU writes a small dot as `reduce(multiply(broadcast(v), w))`
(hloflops.remat.matvec_multiplies). Under tensor parallelism the SPMD partitioner may window the
forward's product: a loop over the contraction's shards (passed around by `collective-permute`),
each trip a partial product `reduce(multiply(...))` of a window, summed into an accumulator
(hloflops.remat.windowed_matvec_loops reads such loops). The recompute in the backward reads its
operand whole (the backward gathers it anyway) and XLA writes it as one multiply and one reduce
over the whole contraction. Its value is no partial sum the forward computes, so the pairing finds
no partner for the recompute's reduce and leaves it unsure: model FLOPs, in the range only.

The program without remat computes that product once, in its forward, and keeps the result for
its backward (the relu's mask, the next layer's input): its backward has no such reduce. TPU
draws 270 (linen_remat_scan, reduce 24,192 = 3 x 64 x 128 - 3 x 128 short) and 210 (nnx_scan,
reduce 1,440 and the product's multiply 1,536 short): the twin's forward runs the same window
loop, the recompute's whole product is remat.

Weak, not sure: where the forward loop runs only because of remat (the twin gathers once and runs
a plain product, hloflops.remat.windowed_matvec_loops: TPU 191, 293) the loop's reduces add
(trips - 1) x outputs fewer than the twin's plain reduce, a negative share of the reduce opcode
counted on the loop's reduces (windowed_matvec_loops.windowed_product_shares); and nothing in this program says
how the twin windowed its forward in general. Counted as remat, the low end left where it was:
the range does not move. The multiply of the product gets its reduce's answer
(`with_matvec_multiplies`).

The sign: a remat-named reduce named for a dot (`.../rematted_computation/.../dot_general`) of a
multiply of a broadcast named for a dot (a matvec), left unsure, and a forward window loop of
matvec products (no `transpose(` and no remat name; a collective-permute inside) named for the
same dot (its name ends with the recompute's inner name), whose product's reduce has as many
outputs. On cached TPU draws 0-419 it fires on 191 (3 reduces), 210, 270 and 293 (2)."""

from __future__ import annotations

from dataclasses import replace

from hloflops.remat.index import RematIndex
from hloflops.remat.names import ends_with, inner_tail, is_remat_named
from hloflops.remat.regathered_windowed_einsums import forward_permuting_loops
from hloflops.remat.sites import Key
from hloflops.remat.windowed_matvec_loops import matvec_products, multiply_through_views
from hloparse.ir import Computation, Instruction, Module

def windowed_forward_matvecs(module: Module) -> set[Key]:
    """(computation, reduce) of each remat-named matvec reduce whose forward product runs in a
    window loop (module docstring); not yet checked against the index."""
    loops: list[tuple[str, set[int]]] = []  # (the loop's name, its products' output sizes)
    for _, inst, _, held in forward_permuting_loops(module):
        products = matvec_products(module, inst, held)
        if not products:
            continue
        sizes = {_elements(i) for name in products for i in module.by_name[name].instructions
                 if i.opcode == "reduce"}
        loops.append((inst.op_name, sizes))
    if not loops:
        return set()
    found: set[Key] = set()
    for comp, inst in module.instructions():
        if inst.opcode != "reduce" or not is_remat_named(inst) or not _is_dot_name(inst.op_name) \
                or not inst.operands or not _matvec(comp, inst.operands[0]):
            continue
        tail = inner_tail(inst.op_name)
        if tail and any(ends_with(name, tail) and _elements(inst) in sizes for name, sizes in loops):
            found.add((comp.name, inst.name))
    return found


def with_windowed_forward_matvecs(module: Module, index: RematIndex) -> RematIndex:
    """The index with each such reduce left unsure counted as remat, weak (module docstring)."""
    keys = frozenset(windowed_forward_matvecs(module)) & index.unsure
    if not keys:
        return index
    return replace(index, remat=index.remat | keys, weak=index.weak | keys, unsure=index.unsure - keys)


def _is_dot_name(op_name: str) -> bool:
    """Named for a dot (jax's `dot_general`, as the last component)."""
    return op_name.rsplit("/", 1)[-1].startswith("dot_general")


def _matvec(comp: Computation, name: str) -> bool:
    """Is `name` (through views) a multiply one of whose operands is a broadcast named for a dot?"""
    product = multiply_through_views(comp, name)
    return product is not None and any(_dot_broadcast(comp, o) for o in product.operands)


def _dot_broadcast(comp: Computation, name: str) -> bool:
    inst = comp.by_name.get(name)
    return inst is not None and inst.opcode == "broadcast" and _is_dot_name(inst.op_name or "")


def _elements(inst: Instruction) -> int:
    """Elements of an instruction's (array) result; 0 for a tuple (a variadic reduce)."""
    return inst.shape.num_elements
