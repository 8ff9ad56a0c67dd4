"""A square's linearization coefficient that XLA folded away in the backward loop (after
optimization, loop forms; hloflops.remat.twin_saves applies it).

jax linearizes `x * x` (`square`, `x ** 2`) as `g * (2 * x)`: the coefficient `2 * x` is a
multiply of its own. The program without remat computes it in its forward loop and saves it into
a stack, which its backward loop reads. The program with remat recomputes `x * x` in its backward
loop, and the coefficient there too, in the same loop body as the gradient reading it, so XLA's
simplifier moves the constant into the cotangent: `(2 * x) * broadcast(s)` becomes
`x * broadcast(2 * s)` (a layer norm's variance, whose cotangent is one value per row: the `2`
lands in the row's scale beside the `1 / n`). The coefficient's full-size multiply is gone from
this program and runs in the other: per opcode, one multiply of the square's size that this
program's count of recomputed multiplies must give back (base seeds 16, 76, more 107, 116, 122:
each layer norm's `x * x` recompute counted against nothing the twin lacks). The same holds for a
centred variance, Haiku's `jnp.var` `mean(square(x - mean))` in an hk.layer_stack loop: `square`
is the product `d * d` of the recomputed `d = x - mean` (a fusion parameter, its `subtract` in
another fusion), the twin saves `2 * d`, and the fold leaves `d * broadcast(s * (2 / n))` (more
seeds 86, 90, 94, 98; held-out 218, 221, 247: one square's size over per layer norm without it).

A square's coefficient is still there where some multiply of the loop body scales `x` by a
constant, or scales what `x` scales by a constant (`mean = sum * (1 / n)`: XLA writes the
coefficient `2 * mean` as `sum * (2 / n)`, in both programs). Only a square that is reduced
(a variance's, a norm's `sum(x * x)`): the reduce's transpose is the broadcast of a smaller
cotangent, where the constant folds; a product `x * x` read otherwise is the program's own or a part
of another (gelu's `x ** 3`, its derivative's `3 * x ** 2`) and is left alone."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.op_kinds import shape_key
from hloflops.remat.sites import Key, SiteKey, SiteOp, one_call_site, source_op, value_readers
from hloflops.remat.values import Val
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})


def folded_squares(module: Module, ops: list[SiteOp]) -> list[tuple[SiteOp, Val]]:
    """The reduced remat-marked squares `x * x` of a backward loop body (one running no forward op:
    a scan's backward loop) where no multiply of that body scales `x` by a constant, with the value
    of `x`: their coefficient `2 * x` was folded away (module docstring). One per loop body and
    value."""
    backward = backward_loop_bodies(module, ops)
    squares = [op for op in ops if op.frame in backward and op.marked and op.inst.opcode == "multiply"
               and len(op.inst.operands) == 2 and op.inst.operands[0] == op.inst.operands[1]]
    if not squares:
        return []
    callers = one_call_site(module)
    readers = value_readers(module)
    by_key = {op.key: op for op in ops}

    def source(op: SiteOp, name: str) -> SiteOp | None:
        return source_op(module, callers, by_key, module.by_name[op.key[0]], name, op.key[2],
                         lambda inst: inst.opcode in _VIEWS, 32)

    def scaled(op: SiteOp | None) -> Val | None:
        """What a multiply by a constant scales (its other operand's value), else None."""
        if op is None or op.inst.opcode != "multiply" or len(op.inst.operands) != 2:
            return None
        comp = module.by_name[op.key[0]]
        for const, other in (op.inst.operands, op.inst.operands[::-1]):
            if _is_constant(comp, const) and not _is_constant(comp, other):
                found = source(op, other)
                return found.exact if found is not None else None
        return None

    scales: dict[str, set[Val]] = {}  # per loop body, the values it scales by a constant
    for op in ops:
        if op.frame in backward:
            value = scaled(op)
            if value is not None:
                scales.setdefault(op.frame, set()).add(value)
    out: list[tuple[SiteOp, Val]] = []
    done: set[tuple[str, Val]] = set()
    for square in sorted(squares, key=lambda op: op.order):
        if (square.frame, square.exact) in done:
            continue
        done.add((square.frame, square.exact))
        x = source(square, square.inst.operands[0])
        if x is None or not _reduced(module, callers, readers, module.by_name[square.key[0]], square.inst.name):
            continue
        mine = scales.get(square.frame, set())
        if x.exact in mine or (scaled(x) is not None and scaled(x) in mine):
            continue  # the coefficient is there (or, through `x`'s own constant, in another form)
        out.append((square, x.exact))
    return out


def coefficient_offsets(ops: list[SiteOp], squares: list[tuple[SiteOp, Val]], remat: set[SiteKey]
                        ) -> set[SiteKey]:
    """Counted recomputes to give back: one multiply of each folded square's shape in its loop
    body, the square's own copy first."""
    out: set[SiteKey] = set()
    for square, _ in squares:
        kind = shape_key(square.inst.shape)
        offsets = sorted((op for op in ops if op.frame == square.frame and op.key in remat and op.key not in out
                          and op.inst.opcode == "multiply" and shape_key(op.inst.shape) == kind),
                         key=lambda op: (op.exact != square.exact, op.order))
        out |= {op.key for op in offsets[:1]}
    return out


def folded_read(comp: Computation, reader: Instruction, x: str) -> bool:
    """Is `reader` the gradient's product a folded coefficient leaves, `x * broadcast(2 * s)`?"""
    if reader.opcode != "multiply" or len(reader.operands) != 2 or x not in reader.operands:
        return False
    other = comp.by_name.get(reader.operands[1] if reader.operands[0] == x else reader.operands[0])
    while other is not None and other.opcode in _VIEWS and other.operands:
        other = comp.by_name.get(other.operands[0])
    return other is not None and other.opcode == "broadcast"


def _reduced(module: Module, callers: Mapping[str, tuple[Computation, Instruction] | None],
             readers: Mapping[Key, list[Instruction]], comp: Computation, name: str) -> bool:
    """Is the value read by a reduce or a reduce-window (XLA's partial sums of a long reduce),
    through views and converts, out of a fusion from its root and into one through its parameter?"""
    pending, seen = [(comp, name)], set()
    while pending and len(seen) < 256:
        comp, name = pending.pop()
        if (comp.name, name) in seen:
            continue
        seen.add((comp.name, name))
        if comp.root.name == name and callers.get(comp.name) is not None:
            caller, fusion = callers[comp.name]
            pending.append((caller, fusion.name))
        for inst in readers.get((comp.name, name), ()):
            if inst.opcode in ("reduce", "reduce-window"):
                return True
            if inst.opcode in _VIEWS | {"convert"}:
                pending.append((comp, inst.name))
            elif inst.opcode == "fusion":
                callee = module.by_name[inst.called(CallRole.FUSION)[0]]
                pending += [(callee, param.name) for param in callee.instructions if param.opcode == "parameter"
                            and parameter_number(param) < len(inst.operands)
                            and inst.operands[parameter_number(param)] == name]
    return False


def _is_constant(comp: Computation, name: str) -> bool:
    """A constant, through views and broadcasts."""
    inst = comp.by_name.get(name)
    while inst is not None and inst.opcode in _VIEWS | {"broadcast"} and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode == "constant"
