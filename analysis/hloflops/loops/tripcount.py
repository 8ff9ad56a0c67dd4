"""Trip counts of `while` loops, each with where it came from.

Sources, tried in this order:

1. `override`: the user named this while instruction in `overrides` (always wins).
2. `backend_config`: XLA's `known_trip_count` (written by WhileLoopTripCountAnnotator after
   optimization).
3. `pattern`: the loop is a counter. We find the scalar elements of the loop state that the
   condition reads (through fusions, calls, copies, converts ...), check that the body updates
   the counter by a constant step, find its initial value (through tuples, get-tuple-element,
   copies, calls and the parameters of enclosing computations) and solve
   `init + k*step <dir> bound` in closed form for LT, LE, GT, GE, NE and EQ, increasing or
   decreasing, either operand order. Loop-invariant elements (a bound carried in the tuple)
   are substituted by their initial value.
4. `evaluation`: anything else built from scalar arithmetic on those elements (several
   counters, multiplicative updates, float counters, selects ...) is stepped exactly, with
   the element type's arithmetic, for at most `EVALUATION_LIMIT` iterations.
5. `override` again: an op_name pattern in `overrides` (fnmatch syntax, e.g. `"*while*"`) that
   matches the while's op_name fills in a count that 1-4 could not find. Patterns never replace
   a known count: only an exact instruction name does.
6. `unknown`: `value` is None. `lower` is what is certain (0 body executions, unless the
   evaluation saw more); the condition still runs at least once. Never silently 1.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Mapping

from hloflops.loops import loop_eval, trip_bounds
from hloflops.loops.loop_eval import Expr, Path, Tracer
from hloparse.ir import CallRole, Computation, Instruction, Module

SOURCES = ("backend_config", "pattern", "evaluation", "override", "unknown")
EVALUATION_LIMIT = loop_eval.EVALUATION_LIMIT  # iterations the bounded evaluation steps before giving up
MAX_STATE_ELEMENTS = 16  # loop-state scalars the evaluation follows at most
WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class TripCount:
    value: int | None  # None: unknown
    source: str  # one of SOURCES
    lower: int  # certain lower bound on the number of body executions
    upper: int | None  # upper bound, None if unbounded / unknown
    note: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None


def known(value: int, source: str, note: str = "") -> TripCount:
    return TripCount(value, source, value, value, note)


def unknown(note: str, lower: int = 0) -> TripCount:
    return TripCount(None, "unknown", lower, None, note)


def trip_count(module: Module, computation: Computation | str, while_instruction: Instruction | str,
               overrides: Mapping[str, int] | None = None) -> TripCount:
    """The trip count of one while instruction (see the module docstring for the sources)."""
    comp = module.computation(computation) if isinstance(computation, str) else computation
    inst = comp.by_name[while_instruction] if isinstance(while_instruction, str) else while_instruction
    if inst.opcode != "while":
        raise ValueError(f"{inst.name} is a {inst.opcode}, not a while")
    overrides = overrides or {}
    inferred = backend_config_trip_count(inst)
    if inferred is None:
        inferred = infer_trip_count(module, comp, inst)
    elif not inferred.known:  # a known_trip_count XLA cannot have written: the loop's own HLO decides
        own = infer_trip_count(module, comp, inst)
        inferred = own if own.known else unknown(f"{inferred.note}; {own.note}" if own.note else inferred.note,
                                                 own.lower)
    else:
        own = infer_trip_count(module, comp, inst)
        if own.known and own.value != inferred.value:  # hand-written configs can disagree
            inferred = TripCount(inferred.value, inferred.source, inferred.lower, inferred.upper,
                                 f"{inferred.note}; the loop's own HLO gives {own.value} ({own.source})")
    if inst.name in overrides:
        value = _check_override(inst.name, overrides[inst.name])
        note = f"set by the user for {inst.name}"
        if inferred.known and inferred.value != value:
            note += f"; the analysis found {inferred.value} ({inferred.source})"
        return known(value, "override", note)
    if inferred.known:
        return inferred
    op_name = inst.op_name
    for key, value in overrides.items():
        if op_name and (fnmatch.fnmatchcase(op_name, key) if WILDCARDS & set(key) else op_name == key):
            note = f"set by the user through op_name pattern {key!r}; analysis: {inferred.note}"
            return known(_check_override(key, value), "override", note)
    return inferred


def _check_override(key: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"trip count override {key!r} must be a non-negative int, got {value!r}")
    return value


def backend_config_trip_count(inst: Instruction) -> TripCount | None:
    config = inst.backend_config
    if not isinstance(config, dict):
        return None
    entry = config.get("known_trip_count")
    if not isinstance(entry, dict) or "n" not in entry:
        return None
    try:
        value = int(entry["n"])
    except (TypeError, ValueError):
        return None
    if not 0 <= value <= INT64_MAX:
        # XLA stores the count as an int64 and never writes a negative one: such a value is
        # the file's fault, and multiplying by it would give negative or absurd "exact" totals.
        shown = str(value) if len(str(value)) <= 24 else f"a {len(str(value))}-digit number"
        why = "negative" if value < 0 else "beyond int64"
        return unknown(f"backend_config's known_trip_count {shown} is {why}: ignored")
    return known(value, "backend_config", "XLA's known_trip_count")


INT64_MAX = 2**63 - 1


def while_callees(module: Module, inst: Instruction) -> tuple[Computation, Computation]:
    body = module.computation(inst.called(CallRole.WHILE_BODY)[0])
    condition = module.computation(inst.called(CallRole.WHILE_CONDITION)[0])
    return body, condition


def infer_trip_count(module: Module, computation: Computation, inst: Instruction,
                     evaluation_limit: int = EVALUATION_LIMIT) -> TripCount:
    """Steps 3 and 4 only (no backend_config, no overrides): the loop read from its HLO."""
    try:
        return _infer(module, computation, inst, evaluation_limit)
    except RecursionError:  # a scalar chain deeper than Python's stack: say so, do not crash
        return unknown("the loop's scalar dependency chain is too deep to trace")


def _infer(module: Module, computation: Computation, inst: Instruction, evaluation_limit: int) -> TripCount:
    tracer = Tracer(module)
    body, condition = while_callees(module, inst)
    cond_expr = loop_eval.fold(tracer.trace(tracer.loop_frame(condition), condition.root.name))
    reason = loop_eval.first_opaque(cond_expr)
    if reason is not None:
        return unknown(f"the condition depends on {reason}")
    # The closure of state elements the condition depends on, through the body's updates.
    body_frame = tracer.loop_frame(body)
    updates: dict[Path, Expr] = {}
    pending = sorted(loop_eval.variables(cond_expr))
    while pending:
        path = pending.pop()
        if path in updates:
            continue
        if len(updates) >= MAX_STATE_ELEMENTS:
            return unknown(f"the condition depends on more than {MAX_STATE_ELEMENTS} loop-state elements")
        update = loop_eval.fold(tracer.trace(body_frame, body.root.name, path))
        reason = loop_eval.first_opaque(update)
        if reason is not None:
            return _first_check(tracer, computation, inst, cond_expr,
                                f"loop-state element {list(path)} is updated from {reason}")
        updates[path] = update
        pending.extend(sorted(loop_eval.variables(update) - updates.keys()))
    # Initial values, from the while's operand in the enclosing computation(s).
    init_frame = tracer.outer_frame(computation)
    initial: dict[Path, object] = {}
    dtypes: dict[Path, str] = {}
    runtime: dict[Path, Expr] = {}  # elements whose initial value is a runtime value
    for path in updates:
        expr = loop_eval.fold(tracer.trace(init_frame, inst.operands[0], path))
        if expr[0] != "const":
            runtime[path] = expr
            continue
        initial[path], dtypes[path] = expr[1], expr[2]
    if runtime:
        path, expr = next(iter(runtime.items()))
        why = loop_eval.first_opaque(expr) or "a non-constant expression"
        return _runtime_bound(cond_expr, updates, initial, runtime, dtypes,
                              f"initial value of loop-state element {list(path)} is unknown: {why}")
    if not updates:  # the condition is a constant
        return _constant_condition(cond_expr, evaluation_limit)
    invariant = {p: initial[p] for p, u in updates.items() if u == ("var", p)}
    counted = pattern_trip_count(cond_expr, updates, initial, invariant, dtypes)
    if counted is not None:
        return counted
    return evaluate_trip_count(cond_expr, updates, initial, evaluation_limit)


def _runtime_bound(cond_expr: Expr, updates: Mapping[Path, Expr], initial: Mapping[Path, object],
                   runtime: Mapping[Path, Expr], dtypes: Mapping[Path, str], why: str) -> TripCount:
    """Unknown, with the bounds a clamped runtime bound proves (hloflops.loops.trip_bounds)."""
    bounds = trip_bounds.counter_trip_bounds(cond_expr, updates, initial, runtime, dtypes, solve_counter,
                                             _constant_step)
    if bounds is None:
        return unknown(why)
    lower, upper, note = bounds
    if upper is not None and upper == lower:
        return known(upper, "pattern", note + f": the count is {upper} at both ends")
    return TripCount(None, "unknown", lower, upper, f"{why}; {note}")


def _first_check(tracer: Tracer, computation: Computation, inst: Instruction, cond_expr: Expr,
                 why: str) -> TripCount:
    """The body cannot be followed, but the condition's first check may still be decidable:
    false means exactly 0 iterations, true means at least 1."""
    frame = tracer.outer_frame(computation)
    values = {}
    for path in loop_eval.variables(cond_expr):
        expr = loop_eval.fold(tracer.trace(frame, inst.operands[0], path))
        if expr[0] != "const":
            return unknown(why)
        values[path] = expr[1]
    try:
        first = loop_eval.evaluate(cond_expr, values)
    except (loop_eval.EvaluationError, OverflowError, ValueError, ZeroDivisionError, TypeError):
        return unknown(why)
    if not first:
        return known(0, "evaluation", "the condition is false on entry")
    return unknown(why + "; the condition holds on entry, so the body runs at least once", lower=1)


def _constant_condition(cond_expr: Expr, evaluation_limit: int) -> TripCount:
    if cond_expr[0] == "const" and not cond_expr[1]:
        return known(0, "pattern", "the condition is constant false")
    return unknown("the condition is constant true: the loop never exits through its condition "
                   "(the body runs at least once)", lower=1)


# ---- closed form -----------------------------------------------------------------------------

SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def pattern_trip_count(cond_expr: Expr, updates: Mapping[Path, Expr], initial: Mapping[Path, object],
                       invariant: Mapping[Path, object], dtypes: Mapping[Path, str]) -> TripCount | None:
    """`init + k*step <dir> bound` solved for the first k where it is false; None if the loop
    is not of that shape (then it is evaluated instead)."""
    counters = [p for p in updates if p not in invariant]
    if len(counters) != 1:
        return None
    iv = counters[0]
    dtype = dtypes[iv]
    if dtype not in loop_eval.INT_BITS:
        return None  # float counters accumulate rounding: evaluate them exactly instead
    cond = loop_eval.fold(loop_eval.substitute(cond_expr, invariant, dtypes))
    step = _constant_step(loop_eval.fold(loop_eval.substitute(updates[iv], invariant, dtypes)), iv)
    if step is None or cond[0] != "op" or cond[1] != "compare":
        return None
    left, right = cond[4]
    direction = cond[3]
    if left == ("var", iv) and right[0] == "const":
        bound = right[1]
    elif right == ("var", iv) and left[0] == "const":
        bound, direction = left[1], SWAPPED[direction]
    else:
        return None
    if isinstance(bound, bool) or not isinstance(bound, int):
        return None
    init = initial[iv]
    n = solve_counter(init, step, direction, bound)
    if n is None or not _in_range(init, step, n, dtype):
        return None  # no termination without wrap-around, or it wraps: let the evaluation decide
    note = f"counter element {list(iv)}: init {init}, step {step:+d}, exits when not (i {direction} {bound})"
    return known(n, "pattern", note)


def _constant_step(update: Expr, iv: Path) -> int | None:
    if update[0] != "op" or update[1] not in ("add", "subtract"):
        return None
    a, b = update[4]
    if update[1] == "add" and a == ("var", iv) and b[0] == "const":
        step = b[1]
    elif update[1] == "add" and b == ("var", iv) and a[0] == "const":
        step = a[1]
    elif update[1] == "subtract" and a == ("var", iv) and b[0] == "const":
        step = -b[1] if isinstance(b[1], int) else None
    else:
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def solve_counter(init: int, step: int, direction: str, bound: int) -> int | None:
    """The first k >= 0 with not (init + k*step <direction> bound); None if there is none
    without overflow (the counter moves away from the bound, or never hits it exactly)."""
    holds = loop_eval.COMPARE[direction]
    if not holds(init, bound):
        return 0
    if direction in ("LT", "LE"):
        if step <= 0:
            return None
        gap = bound - init + (1 if direction == "LE" else 0)  # k*step >= gap ends the loop
        return _ceil_div(gap, step)
    if direction in ("GT", "GE"):
        if step >= 0:
            return None
        gap = init - bound + (1 if direction == "GE" else 0)
        return _ceil_div(gap, -step)
    if direction == "NE":
        if step == 0 or (bound - init) % step != 0 or (bound - init) // step <= 0:
            return None
        return (bound - init) // step
    if direction == "EQ":  # init == bound here
        return 1 if step != 0 else None
    return None


def _in_range(init: int, step: int, n: int, dtype: str) -> bool:
    """Every counter value the loop computes (up to the exiting one) fits the type unwrapped."""
    last = init + n * step
    return last == loop_eval.cast(last, dtype) and init == loop_eval.cast(init, dtype)


# ---- bounded evaluation ---------------------------------------------------------------------


def evaluate_trip_count(cond_expr: Expr, updates: Mapping[Path, Expr], initial: Mapping[Path, object],
                        limit: int) -> TripCount:
    try:
        cond = loop_eval.compile_expr(cond_expr)
        steps = [(path, loop_eval.compile_expr(u)) for path, u in updates.items() if u != ("var", path)]
        state = dict(initial)
        for k in range(limit + 1):
            if not cond(state):
                elements = ", ".join(str(list(p)) for p, _ in steps)
                return known(k, "evaluation", f"stepped loop-state element(s) {elements} exactly")
            if k == limit:
                break
            state = {**state, **{path: step(state) for path, step in steps}}
    except (loop_eval.EvaluationError, OverflowError, ValueError, ZeroDivisionError, TypeError) as error:
        return unknown(f"the evaluation stopped: {error}")
    return unknown(f"still running after {limit} evaluated iterations", lower=limit)


# ---- all loops of a module -----------------------------------------------------------------


def all_trip_counts(module: Module, overrides: Mapping[str, int] | None = None) -> dict[str, TripCount]:
    """Every while instruction of the module (by name) -> its TripCount."""
    return {
        inst.name: trip_count(module, comp, inst, overrides)
        for comp, inst in module.instructions()
        if inst.opcode == "while"
    }
