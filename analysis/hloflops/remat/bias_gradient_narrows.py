"""The narrow the program without remat may make of a gradient that only matmuls read, where this
program sums its bias gradient in a reduce of its own (after optimization; TPU; a low end for the
range; hloflops.remat.pairing calls `bias_gradient_narrows`).

A layer's output gradient `g` (f32) is read by its bias gradient `sum(g, batch)` and by the
matmuls of its weight and input gradients; a residual layer's also by the residual's add, which
needs it wide. TPU's matmuls read their operands in bf16 at default precision, so where only
matmuls read `g` (the first layer of a residual stack, whose input gradient feeds no add: the
last gradient the backward computes) XLA may merge the bias gradient's reduce into the fusion
computing `g` as a second output and hand `g` out narrowed to bf16 beside it: one `convert` of
`g`'s elements that the matmuls then read. Here the reduce stayed a fusion (or a bare reduce) of
its own and each matmul's fusion reads `g` wide: no convert. The program without remat fuses its
backward apart (it reads stored activations where this one reads recomputed ones) and does either:
TPU draws 149 and 161 (Python loops of MLPs, policy none: convert -1,024 and -512, the twin's
merged narrow of the first layer's `g`), 39, 79, 86, 95, 102, 115, 136, 168, 171, 178 alike,
while 4, 9, 50, 103, 108, 117, 132, 163, 177, 189 of the same structure here keep `g` wide there
too. Nothing in this program tells the two apart, so the narrow is a hinge of one convert of `g`
(`RematIndex.twin_narrows`): it lowers the range's low end only, never the split.

Only where two or more fusions read `g` besides the reduce, each only as a matmul's operand
(through views): with one reader the narrow would fuse into that reader (TPU draw 167, exact, whose
twin narrows no such value)."""

from __future__ import annotations

from hloflops.remat.op_kinds import LAYOUT_VIEWS, MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# How deep a reader's nested fusions are followed to the matmul reading `g`.
_DEPTH = 4


def bias_gradient_narrows(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """The op computing each gradient `g` (module docstring) at each of its call sites -> 1: the
    narrow of `g` the program without remat may run."""
    targets: dict[tuple[str, str], int] = {}
    for comp in module.computations:
        if comp.is_fusion_body:
            continue
        for inst in comp.instructions:
            reduce = _bias_reduce(module, inst)
            if reduce is None:
                continue
            source = comp.by_name.get(inst.operands[0])
            if source is None or source.shape.is_tuple or source.shape.element_type != "f32" \
                    or len(source.shape.dims) < 2:
                continue
            readers = [user for user in comp.users.get(source.name, ()) if user is not inst]
            if len(readers) < 2 or not all(_only_matmuls_read(module, user, source.name) for user in readers):
                continue
            computed = _computing_op(module, comp, source)
            if computed is not None:
                targets[computed] = 1
    return {op.key: n for op in ops for n in (targets.get(op.key[:2], 0),) if n}


def _bias_reduce(module: Module, inst: Instruction) -> Instruction | None:
    """The backward's sum `inst` computes outside any other work: a bare reduce, or a fusion whose
    every op but its parameters is that reduce and its reducer's constant."""
    reduce = inst
    if inst.opcode == "fusion":
        body = module.by_name.get(inst.called(CallRole.FUSION)[0])
        if body is None or len(inst.operands) != 2:
            return None
        reduce = body.root
        if any(op.opcode not in ("parameter", "constant") for op in body.instructions if op is not reduce):
            return None
    if reduce.opcode != "reduce" or reduce.shape.is_tuple or "reduce_sum" not in reduce.op_name \
            or phase(reduce.op_name) != "backward":
        return None
    return reduce


def _only_matmuls_read(module: Module, reader: Instruction, name: str, depth: int = 1) -> bool:
    """Does the fusion `reader` read the value `name` only as a matmul's operand (through views,
    nested fusions of views, and nested fusions it reads it in alike)?"""
    if reader.opcode != "fusion":
        return False
    body = module.by_name.get(reader.called(CallRole.FUSION)[0])
    if body is None:
        return False
    params = [p for p in body.parameters
              if parameter_number(p) < len(reader.operands) and reader.operands[parameter_number(p)] == name]
    return bool(params) and all(_into_matmuls(module, body, p.name, depth) for p in params)


def _into_matmuls(module: Module, comp: Computation, name: str, depth: int) -> bool:
    """Does every reader of `name` in `comp` take it into a matmul (through views)?"""
    users = comp.users.get(name, ())
    if not users:
        return False
    for user in users:
        if user.opcode in MATMUL_OPCODES:
            continue
        if user.opcode in LAYOUT_VIEWS or user.opcode == "convert":
            if not _into_matmuls(module, comp, user.name, depth):
                return False
            continue
        if user.opcode != "fusion" or depth > _DEPTH:
            return False
        body = module.by_name.get(user.called(CallRole.FUSION)[0])
        if body is None:
            return False
        if all(op.opcode == "parameter" or op.opcode in LAYOUT_VIEWS for op in body.instructions):
            # a view fusion (TPU's `bitcast_fusion`): its result is the value, read where it goes
            if not _into_matmuls(module, comp, user.name, depth):
                return False
        elif not _only_matmuls_read(module, user, name, depth + 1):
            return False
    return True


def _computing_op(module: Module, comp: Computation, source: Instruction) -> tuple[str, str] | None:
    """The op inside the fusion that computes `source` (the root of its body, or the root tuple's
    element a get-tuple-element takes): (fused computation, op)."""
    index = None
    if source.opcode == "get-tuple-element":
        fusion = comp.by_name.get(source.operands[0])
        index = source.attr("index")
        if fusion is None or index is None:
            return None
        source = fusion
    if source.opcode != "fusion":
        return None
    body = module.by_name.get(source.called(CallRole.FUSION)[0])
    if body is None:
        return None
    root = body.root
    if index is not None:
        if root.opcode != "tuple" or int(index) >= len(root.operands):
            return None
        root = body.by_name.get(root.operands[int(index)])
    if root is None or root.opcode == "parameter" or root.shape.element_type != "f32":
        return None
    return (body.name, root.name)
