"""Scalar expressions of a while loop's state, and their bounded evaluation.

A trip count depends on a few scalar elements of the loop-carried tuple: the ones the
condition reads, and the ones their updates in the body read in turn. This module turns the
HLO that computes such a scalar into a small expression tree over the loop state, inlining
fusions and calls and looking through tuple / get-tuple-element / copy / bitcast, and
evaluates those trees with the element type's own arithmetic (two's-complement wrap-around
for integers, float32 rounding for f32), so that a loop can be stepped exactly.

Expressions are plain tuples (cheap to hash and compare):
    ("var", path)                     element `path` of the loop-carried tuple
    ("const", value, dtype)           a known scalar
    ("op", opcode, dtype, extra, children)   extra = comparison direction or None
    ("opaque", reason)                not a scalar we can follow
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from hloflops.graph import call_graph, call_sites
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

Expr = tuple
Path = tuple[int, ...]

INT_BITS = {"s8": 8, "s16": 16, "s32": 32, "s64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
            "s1": 1, "s2": 2, "s4": 4, "u1": 1, "u2": 2, "u4": 4}
FLOAT_TYPES = ("f16", "bf16", "f32", "f64")

# Opcodes whose scalar value we can compute; everything else is opaque.
ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "negate", "abs",
    "compare", "select", "and", "or", "not", "xor", "shift-left", "shift-right-logical",
    "shift-right-arithmetic", "sign", "clamp", "convert", "is-finite",
})
# Ops that pass their (single-element) operand through unchanged.
PASS_THROUGH = frozenset({"copy", "bitcast", "reshape", "broadcast", "transpose", "copy-done",
                          "optimization-barrier", "slice"})


def opaque(reason: str) -> Expr:
    return ("opaque", reason)


def is_opaque(expr: Expr) -> bool:
    return expr[0] == "opaque"


def first_opaque(expr: Expr) -> str | None:
    """The reason of the first opaque leaf, or None when the whole tree is traceable."""
    if expr[0] == "opaque":
        return expr[1]
    if expr[0] == "op":
        for child in expr[4]:
            reason = first_opaque(child)
            if reason is not None:
                return reason
    return None


def variables(expr: Expr) -> set[Path]:
    if expr[0] == "var":
        return {expr[1]}
    if expr[0] == "op":
        found: set[Path] = set()
        for child in expr[4]:
            found |= variables(child)
        return found
    return set()


# ---- literal values ---------------------------------------------------------------------


def parse_scalar_literal(text: str, dtype: str):
    """`constant(5)`'s literal text -> a Python value of the element type, or None."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):  # a one-element array written {5} or {{5}}
        text = text.strip("{} ")
        if "," in text:
            return None
    lowered = text.lower()
    if dtype == "pred":
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        return None
    try:
        if dtype in INT_BITS:
            return wrap_int(int(text, 0), dtype)
        if dtype in FLOAT_TYPES:
            return to_float(float(lowered), dtype)
    except ValueError:
        return None
    return None


def wrap_int(value: int, dtype: str) -> int:
    bits = INT_BITS[dtype]
    value &= (1 << bits) - 1
    if dtype.startswith("s") and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def to_float(value: float, dtype: str):
    import numpy as np  # numpy gives float32/float16 rounding; the core stays jax-free

    if dtype == "f32":
        return np.float32(value)
    if dtype == "f16":
        return np.float16(value)
    if dtype == "bf16":  # round-to-nearest-even onto bf16 via its float32 bits
        bits = int(np.float32(value).view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return np.uint32(bits).view(np.float32)
    return float(value)


def cast(value, dtype: str):
    if dtype == "pred":
        return bool(value)
    if dtype in INT_BITS:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return wrap_int(value, dtype)
        f = float(value)
        if math.isnan(f):
            return 0
        if math.isinf(f):
            return wrap_int(0, dtype)  # implementation-defined in XLA; never relied on
        return wrap_int(int(f), dtype)  # convert truncates toward zero
    if dtype in FLOAT_TYPES:
        return to_float(float(value), dtype)
    raise EvaluationError(f"element type {dtype} is not evaluated")


class EvaluationError(Exception):
    pass


# ---- evaluation ---------------------------------------------------------------------------

COMPARE = {
    "LT": lambda a, b: a < b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b, "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b,
}


def _int_divide(a: int, b: int) -> int:
    if b == 0:
        raise EvaluationError("integer division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _int_remainder(a: int, b: int) -> int:
    if b == 0:
        raise EvaluationError("integer remainder by zero")
    return a - _int_divide(a, b) * b


def _shift(opcode: str, a: int, b: int, dtype: str) -> int:
    bits = INT_BITS[dtype]
    if b < 0 or b >= bits:
        return -1 if opcode == "shift-right-arithmetic" and a < 0 else 0
    if opcode == "shift-left":
        return a << b
    if opcode == "shift-right-arithmetic":
        return a >> b
    return (a & ((1 << bits) - 1)) >> b  # logical: on the unsigned bit pattern


def _clamped_start(start: int, length: int, size: int) -> int:
    """XLA clamps a dynamic slice's start so that the slice fits in the operand."""
    return min(max(int(start), 0), max(length - size, 0))


def apply_array_op(opcode: str, dtype: str, extra, args: list) -> tuple:
    """The three ops on small 1-D arrays (Python tuples) the tracer follows with `arrays=True`:
    a broadcast scalar, a dynamic-update-slice and a one-element dynamic-slice."""
    if opcode == "broadcast":
        return (cast(args[0], dtype),) * extra
    if opcode == "dynamic-update-slice":
        buffer, update = args[0], args[1] if isinstance(args[1], tuple) else (args[1],)
        start = _clamped_start(args[2], len(buffer), len(update))
        return buffer[:start] + tuple(cast(v, dtype) for v in update) + buffer[start + len(update):]
    buffer = args[0]  # dynamic-slice of one element
    if not isinstance(buffer, tuple) or not buffer:
        raise EvaluationError("dynamic-slice of a non-array")
    return buffer[_clamped_start(args[1], len(buffer), 1)]


ARRAY_OPS = frozenset({"broadcast", "dynamic-update-slice", "dynamic-slice"})


def apply_op(opcode: str, dtype: str, extra, args: list):
    """One scalar HLO op with the result type's semantics."""
    if opcode in ARRAY_OPS:
        return apply_array_op(opcode, dtype, extra, args)
    is_int = dtype in INT_BITS
    if opcode == "compare":
        return bool(COMPARE[extra](args[0], args[1]))
    if opcode == "select":
        return args[1] if args[0] else args[2]
    if opcode == "clamp":
        return cast(min(max(args[1], args[0]), args[2]), dtype)
    if opcode == "convert":
        return cast(args[0], dtype)
    if opcode == "is-finite":
        return math.isfinite(float(args[0]))
    if dtype == "pred":
        a = bool(args[0])
        if opcode == "not":
            return not a
        b = bool(args[1]) if len(args) > 1 else False
        if opcode == "and":
            return a and b
        if opcode == "or":
            return a or b
        if opcode == "xor":
            return a != b
        if opcode in ("maximum", "or"):
            return a or b
        if opcode == "minimum":
            return a and b
        raise EvaluationError(f"{opcode} on pred")
    if opcode == "add":
        result = args[0] + args[1]
    elif opcode == "subtract":
        result = args[0] - args[1]
    elif opcode == "multiply":
        result = args[0] * args[1]
    elif opcode == "divide":
        result = _int_divide(args[0], args[1]) if is_int else args[0] / args[1]
    elif opcode == "remainder":
        result = _int_remainder(args[0], args[1]) if is_int else math.fmod(args[0], args[1])
    elif opcode == "maximum":
        result = max(args[0], args[1])
    elif opcode == "minimum":
        result = min(args[0], args[1])
    elif opcode == "negate":
        result = -args[0]
    elif opcode == "abs":
        result = abs(args[0])
    elif opcode == "sign":
        result = (args[0] > 0) - (args[0] < 0)
    elif is_int and opcode == "and":
        result = args[0] & args[1]
    elif is_int and opcode == "or":
        result = args[0] | args[1]
    elif is_int and opcode == "xor":
        result = args[0] ^ args[1]
    elif is_int and opcode == "not":
        result = ~args[0]
    elif is_int and opcode.startswith("shift"):
        result = _shift(opcode, args[0], args[1], dtype)
    else:
        raise EvaluationError(f"{opcode} on {dtype}")
    return cast(result, dtype)


def compile_expr(expr: Expr) -> Callable[[Mapping[Path, object]], object]:
    """A Python closure computing `expr` from the loop state (a dict path -> value); fast
    enough to step a loop a million times."""
    kind = expr[0]
    if kind == "const":
        value = expr[1]
        return lambda env: value
    if kind == "var":
        path = expr[1]
        return lambda env: env[path]
    if kind == "op":
        _, opcode, dtype, extra, children = expr
        compiled = [compile_expr(c) for c in children]
        return lambda env: apply_op(opcode, dtype, extra, [c(env) for c in compiled])
    raise EvaluationError(f"cannot evaluate: {expr[1]}")


def evaluate(expr: Expr, env: Mapping[Path, object] | None = None):
    return compile_expr(expr)(env or {})


def fold(expr: Expr) -> Expr:
    """Constant-fold: an op whose children are all constants becomes a constant."""
    if expr[0] != "op":
        return expr
    _, opcode, dtype, extra, children = expr
    children = tuple(fold(c) for c in children)
    if all(c[0] == "const" for c in children):
        try:
            return ("const", apply_op(opcode, dtype, extra, [c[1] for c in children]), dtype)
        except (EvaluationError, OverflowError, ZeroDivisionError, ValueError):
            pass
    return ("op", opcode, dtype, extra, children)


def substitute(expr: Expr, values: Mapping[Path, object], dtypes: Mapping[Path, str]) -> Expr:
    if expr[0] == "var" and expr[1] in values:
        return ("const", values[expr[1]], dtypes.get(expr[1], ""))
    if expr[0] == "op":
        return expr[:4] + (tuple(substitute(c, values, dtypes) for c in expr[4]),)
    return expr


# ---- tracing HLO into expressions -----------------------------------------------------------

def effectively_scalar(inst: Instruction) -> bool:
    return inst.shape.is_array and inst.shape.num_elements == 1


class Frame:
    """Where parameters of the computation being traced get their values: the loop state
    (`parameter(0)` of a while body or condition is a var), a calling instruction's operands
    in an outer frame, or (for the outermost frame) the computation's own callers."""

    def __init__(self, module: Module, computation: Computation, *, loop_state: bool = False,
                 caller: Instruction | None = None, parent: Frame | None = None, depth: int = 0):
        self.module = module
        self.computation = computation
        self.loop_state = loop_state
        self.caller = caller
        self.parent = parent
        self.depth = depth
        self.memo: dict[tuple[str, Path], Expr] = {}


class _BranchFrame(Frame):
    """A conditional branch: its parameter is the conditional's operand `operand`."""

    def __init__(self, module: Module, computation: Computation, caller: Instruction, operand: int, parent: Frame):
        super().__init__(module, computation, caller=caller, parent=parent, depth=parent.depth + 1)
        self.operand = operand


def branch_frame(module: Module, computation: Computation, caller: Instruction, operand: int, parent: Frame) -> Frame:
    """The frame of a conditional branch whose parameter is the conditional's operand `operand`."""
    return _BranchFrame(module, computation, caller, operand, parent)


MAX_DEPTH = 24  # nested fusions / calls / enclosing computations followed
EVALUATION_LIMIT = 1 << 17  # iterations a bounded evaluation steps before giving up


MAX_ARRAY = 4096  # elements of a 1-D integer / pred array a tracer with `arrays=True` follows


def small_array(inst: Instruction) -> bool:
    shape = inst.shape
    return (shape.is_array and len(shape.dims) == 1 and 1 < shape.num_elements <= MAX_ARRAY
            and (shape.element_type in INT_BITS or shape.element_type == "pred"))


class Tracer:
    """Builds the expression of one scalar element of an instruction's value. With `arrays`, it
    also follows small 1-D integer arrays built by broadcast and dynamic-update-slice and read
    back by one-element dynamic-slices (a scan's stacked branch indices, read by its backward)."""

    def __init__(self, module: Module, *, arrays: bool = False):
        self.module = module
        self.arrays = arrays

    def loop_frame(self, computation: Computation) -> Frame:
        return Frame(self.module, computation, loop_state=True)

    def outer_frame(self, computation: Computation, depth: int = 0) -> Frame:
        return Frame(self.module, computation, depth=depth)

    def trace(self, frame: Frame, name: str, path: Path = ()) -> Expr:
        key = (name, path)
        if key not in frame.memo:
            frame.memo[key] = ("opaque", "cycle")  # guards against malformed cyclic input
            frame.memo[key] = self._trace(frame, frame.computation.by_name[name], path)
        return frame.memo[key]

    def _trace(self, frame: Frame, inst: Instruction, path: Path) -> Expr:
        op = inst.opcode
        if op == "parameter":
            return self._parameter(frame, inst, path)
        if op == "get-tuple-element":
            return self.trace(frame, inst.operands[0], (int(inst.attributes.get("index", "0")),) + path)
        if op == "tuple":
            if not path:
                return opaque(f"whole tuple {inst.name}")
            if path[0] >= len(inst.operands):
                return opaque(f"tuple index {path[0]} out of range in {inst.name}")
            return self.trace(frame, inst.operands[path[0]], path[1:])
        if op in ("fusion", "call"):
            return self._call(frame, inst, path)
        if op == "while":
            return self._while_result(frame, inst, path)
        if op == "conditional":
            return self._conditional(frame, inst, path)
        if op == "optimization-barrier" or (op in ("copy", "copy-done") and inst.shape.is_tuple):
            return self.trace(frame, inst.operands[0], path)
        if path:
            return opaque(f"{op} {inst.name} has no tuple element {path}")
        if self.arrays and small_array(inst):
            return self._array(frame, inst)
        if not effectively_scalar(inst):
            return opaque(f"{op} {inst.name} is not a scalar ({inst.shape})")
        dtype = inst.shape.element_type
        if op == "dynamic-slice" and self.arrays and len(inst.operands) == 2:
            return ("op", op, dtype, None, tuple(self.trace(frame, o) for o in inst.operands))
        if op == "constant":
            value = parse_scalar_literal(inst.attributes.get("literal", ""), dtype)
            if value is None:
                return opaque(f"constant {inst.name} literal not understood")
            return ("const", value, dtype)
        if op in PASS_THROUGH:
            if not inst.operands:
                return opaque(f"{op} {inst.name} without operand")
            source = frame.computation.by_name[inst.operands[0]]
            if not effectively_scalar(source) or source.shape.element_type != dtype:
                return opaque(f"{op} {inst.name} of a non-scalar")
            return self.trace(frame, inst.operands[0])
        if op in ELEMENTWISE:
            children = tuple(self.trace(frame, o) for o in inst.operands)
            extra = inst.comparison_direction if op == "compare" else None
            return ("op", op, dtype, extra, children)
        return opaque(f"{op} {inst.name}")

    def _array(self, frame: Frame, inst: Instruction) -> Expr:
        """A small 1-D array's whole value (`arrays=True` only)."""
        op, dtype, n = inst.opcode, inst.shape.element_type, inst.shape.num_elements
        if op == "constant":
            literal = inst.attributes.get("literal", "").strip("{} ")
            values = [parse_scalar_literal(v, dtype) for v in literal.split(",")]
            if len(values) != n or any(v is None for v in values):
                return opaque(f"constant {inst.name} literal not understood")
            return ("const", tuple(values), dtype)
        if op == "iota":
            return ("const", tuple(cast(k, dtype) for k in range(n)), dtype)
        if op == "broadcast" and inst.operands and effectively_scalar(frame.computation.by_name[inst.operands[0]]):
            return ("op", op, dtype, n, (self.trace(frame, inst.operands[0]),))
        if op == "dynamic-update-slice" and len(inst.operands) == 3:
            return ("op", op, dtype, None, tuple(self.trace(frame, o) for o in inst.operands))
        if op in ("copy", "bitcast", "reshape") and inst.operands:
            source = frame.computation.by_name[inst.operands[0]]
            if small_array(source) and source.shape.num_elements == n and source.shape.element_type == dtype:
                return self.trace(frame, inst.operands[0])
        return opaque(f"{op} {inst.name} is not a scalar ({inst.shape})")

    def _call(self, frame: Frame, inst: Instruction, path: Path) -> Expr:
        role = CallRole.FUSION if inst.opcode == "fusion" else CallRole.CALL
        callees = inst.called(role) or inst.called(CallRole.TO_APPLY)
        if len(callees) != 1 or frame.depth >= MAX_DEPTH:
            return opaque(f"{inst.opcode} {inst.name}: callee not followed")
        callee = self.module.by_name.get(callees[0])
        if callee is None:
            return opaque(f"{inst.name} calls unknown computation {callees[0]}")
        inner = Frame(self.module, callee, caller=inst, parent=frame, depth=frame.depth + 1)
        return self.trace(inner, callee.root.name, path)

    def _conditional(self, frame: Frame, inst: Instruction, path: Path) -> Expr:
        """A conditional's scalar result: a select over its branches' results. A pred picks
        branch 0 when true; an s32 index picks its branch, out of range the last one."""
        sites = sorted((s for s in inst.calls if s.role == CallRole.BRANCH), key=lambda s: s.index)
        if not sites or len(inst.operands) != len(sites) + 1 or frame.depth >= MAX_DEPTH:
            return opaque(f"conditional {inst.name}")
        selector = self.trace(frame, inst.operands[0])
        results = []
        for site in sites:
            branch = self.module.by_name.get(site.computation)
            if branch is None:
                return opaque(f"conditional {inst.name}: branch {site.computation} missing")
            inner = _BranchFrame(self.module, branch, inst, site.index + 1, frame)
            results.append(self.trace(inner, branch.root.name, path))
        shape = inst.shape
        for index in path:
            if not shape.is_tuple or index >= len(shape.tuple_shapes):
                return opaque(f"conditional {inst.name} has no element {list(path)}")
            shape = shape.tuple_shapes[index]
        if not shape.is_array or shape.num_elements != 1:
            return opaque(f"conditional {inst.name}: element {list(path)} is not a scalar")
        dtype = shape.element_type
        selector_type = frame.computation.by_name[inst.operands[0]].shape.element_type
        if selector_type == "pred" and len(results) == 2:
            return ("op", "select", dtype, None, (selector, results[0], results[1]))
        expr = results[-1]
        for index in range(len(results) - 2, -1, -1):
            pick = ("op", "compare", "pred", "EQ", (selector, ("const", index, selector_type)))
            expr = ("op", "select", dtype, None, (pick, results[index], expr))
        return expr

    def _while_result(self, frame: Frame, inst: Instruction, path: Path) -> Expr:
        """Element `path` of a (nested) while's result: known when the loop never changes it."""
        body_names = inst.called(CallRole.WHILE_BODY)
        body = self.module.by_name.get(body_names[0]) if body_names else None
        if body is None or frame.depth >= MAX_DEPTH:
            return opaque(f"while {inst.name}: body not followed")
        update = self.trace(self.loop_frame(body), body.root.name, path)
        if update == ("var", path):
            return self.trace(frame, inst.operands[0], path)
        return self._run_to_exit(frame, inst, body, path)

    def _run_to_exit(self, frame: Frame, inst: Instruction, body: Computation, path: Path) -> Expr:
        """Element `path` of a nested while's result when the loop changes it: step the loop
        (its condition and the elements involved) from its initial values to the exit."""
        cond_names = inst.called(CallRole.WHILE_CONDITION)
        condition = self.module.by_name.get(cond_names[0]) if cond_names else None
        if condition is None:
            return opaque(f"while {inst.name}: condition missing")
        cond = fold(self.trace(self.loop_frame(condition), condition.root.name))
        updates: dict[Path, Expr] = {}
        pending = [path, *sorted(variables(cond))]
        while pending:
            p = pending.pop()
            if p in updates:
                continue
            if len(updates) >= 16:
                return opaque(f"while {inst.name} has too many state elements to step")
            updates[p] = fold(self.trace(self.loop_frame(body), body.root.name, p))
            pending.extend(variables(updates[p]) - updates.keys())
        reason = first_opaque(cond) or next((first_opaque(u) for u in updates.values() if first_opaque(u)), None)
        if reason is not None:
            return opaque(f"while {inst.name} changes element {list(path)} ({reason})")
        state: dict[Path, object] = {}
        dtype = ""
        for p in updates:
            init = fold(self.trace(frame, inst.operands[0], p))
            if init[0] != "const":
                return opaque(f"while {inst.name}: initial element {list(p)} unknown")
            state[p] = init[1]
            if p == path:
                dtype = init[2]
        try:
            check = compile_expr(cond)
            steps = [(p, compile_expr(u)) for p, u in updates.items() if u != ("var", p)]
            for _ in range(EVALUATION_LIMIT + 1):
                if not check(state):
                    return ("const", state[path], dtype)
                state = {**state, **{p: step(state) for p, step in steps}}
        except (EvaluationError, OverflowError, ValueError, ZeroDivisionError, TypeError):
            pass
        return opaque(f"while {inst.name}: result not evaluated")

    def _parameter(self, frame: Frame, inst: Instruction, path: Path) -> Expr:
        number = parameter_number(inst)
        if isinstance(frame, _BranchFrame):  # a branch's one parameter is its own operand
            return self.trace(frame.parent, frame.caller.operands[frame.operand], path)
        if frame.loop_state:
            return ("var", path) if number == 0 else opaque("while computation parameter > 0")
        if frame.parent is not None:
            caller = frame.caller
            if number >= len(caller.operands):
                return opaque(f"{caller.name} has no operand {number}")
            return self.trace(frame.parent, caller.operands[number], path)
        return self._from_callers(frame, number, path)

    def _from_callers(self, frame: Frame, number: int, path: Path) -> Expr:
        """A parameter of an outermost frame: its value at every call site of the computation.
        ENTRY parameters are runtime inputs. A while body/condition parameter is the loop
        state, known only for elements the enclosing loop never changes."""
        comp = frame.computation
        if comp.is_entry:
            return opaque(f"ENTRY parameter {number} (a runtime input)")
        if frame.depth >= MAX_DEPTH:
            return opaque("call chain too deep")
        graph = call_graph(self.module)
        sites = [(self.module.by_name[caller], inst, role) for caller, inst, role in call_sites(graph, comp.name)]
        if not sites:
            return opaque(f"computation {comp.name} is never called")
        values = []
        for caller_comp, caller_inst, role in sites:
            outer = self.outer_frame(caller_comp, frame.depth + 1)
            if role in (CallRole.WHILE_BODY, CallRole.WHILE_CONDITION):
                expr = self._loop_invariant(outer, caller_inst, path)
            elif role in (CallRole.CALL, CallRole.FUSION, CallRole.ASYNC) or caller_inst.opcode == "call":
                if number >= len(caller_inst.operands):
                    return opaque(f"{caller_inst.name} has no operand {number}")
                expr = self.trace(outer, caller_inst.operands[number], path)
            elif role == CallRole.BRANCH:
                site = [s for s in caller_inst.calls if s.computation == comp.name][0]
                expr = self.trace(outer, caller_inst.operands[site.index + 1], path)
            else:
                expr = opaque(f"parameter reached through {role}")
            expr = fold(expr)
            if expr[0] != "const":
                return expr if expr[0] == "opaque" else opaque(f"parameter {number} of {comp.name} is not constant")
            values.append(expr)
        if len({(v[1], v[2]) for v in values}) != 1:
            return opaque(f"{comp.name} is called with different values ({len(values)} call sites)")
        return values[0]

    def _loop_invariant(self, outer: Frame, while_inst: Instruction, path: Path) -> Expr:
        """Element `path` of an enclosing loop's state, if the loop never changes it."""
        body = self.module.by_name.get(while_inst.called(CallRole.WHILE_BODY)[0])
        if body is None:
            return opaque("enclosing loop body missing")
        update = self.trace(self.loop_frame(body), body.root.name, path)
        if update != ("var", path):
            return opaque(f"element {path} changes in enclosing loop {while_inst.name}")
        return self.trace(outer, while_inst.operands[0], path)
