"""Everything about op_name name stacks in one place: how a stack splits into frames, which
frames are jax's transformation wrappers rather than the model's own names, and the phase
(forward, backward, other) a stack says an op belongs to.

Joined op_names. When XLA (or MLIR before it) merges instructions from several places into one,
it joins their op_names with ';' (`jit(f)/jvp(Dense_0)/mul;jit(f)/transpose(jvp(Dense_0))/add`,
or `.../mul;jit(f)`). The rule: an instruction belongs to the FIRST part, the name of the op
that was kept (the merged ones are appended after it). `scope()` applies it, so every view
built on a row's scope (grouping by scope and by module, folded stacks, the HTML chart) sees one
real name stack and never a synthetic key such as `mul;jit(f)`. `first_op_name` is the rule.
"""

from __future__ import annotations

import re
from functools import lru_cache

NO_SCOPE = "(no scope)"
NO_MODULE = "(no module)"
# Name-stack components that say how an op was produced, not which model part it belongs to.
WRAPPER = re.compile(r"^(jit|pjit|jvp|vjp|transpose|remat\d*|checkpoint|closed_call|core_call|custom_jvp_call"
                     r"|custom_vjp_call|rematted_computation|while|body|cond|scan|pmap|xla_pmap|shard_map"
                     r"|named_call|call|checkpoint_name|branch_\d+_fun)(\(.*\))?$")


def phase(op_name: str) -> str:
    """'backward' for transposed code, 'forward' for jvp'd code, else 'other' (optimizer
    updates, loss bookkeeping, non-differentiated programs)."""
    if "transpose(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "other"


def first_op_name(op_name: str) -> str:
    """The first (non-empty) part of an op_name XLA joined from several ops with ';': the op
    that was kept. A ';' inside brackets (`pjit[name=a;b]`) does not split."""
    if ";" not in op_name:
        return op_name
    depth, start = 0, 0
    for i, ch in enumerate(op_name + ";"):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0:
            if op_name[start:i]:
                return op_name[start:i]
            start = i + 1
    return ""


def scope(op_name: str) -> str:
    """The name stack of an op: its op_name (the first part of a ';'-joined one, see the module
    docstring) without the final (primitive) component."""
    head, _, _ = first_op_name(op_name).rpartition("/")
    return head


def split_components(op_name: str) -> list[str]:
    """The frames of a name stack (`jit(f)/transpose(jvp(a/b))/dot` has three), as a list."""
    return list(split_scope(op_name))


@lru_cache(maxsize=65536)  # the remat rules ask for the same name stacks over and over
def model_components(op_name: str) -> tuple[str, ...]:
    """The frames that name a part of the model: every transformation wrapper removed."""
    return tuple(p for p in split_scope(op_name) if not WRAPPER.match(p))


@lru_cache(maxsize=65536)  # pure, and asked for the same name stacks over and over
def model_path(op_name: str) -> str:
    """The op_name with every transformation wrapper removed: the part of the model an op
    computes, the same for a forward op and its recompute."""
    return "/".join(model_components(op_name))


def is_absolute(op_name: str) -> bool:
    """Optimized modules carry whole name stacks (`jit(f)/...`); modules before optimization
    name the ops of a called function relative to that function."""
    return op_name.startswith(("jit(", "pjit(", "pmap(", "xla_pmap("))


@lru_cache(maxsize=65536)  # the same name stacks recur on many instructions
def split_scope(scope: str) -> tuple[str, ...]:
    """Split an op_name name stack on '/', but not inside brackets: a frame such as
    `pjit[name=a/b]` or `transpose(jvp(Dense_0))` stays whole. Empty frames are dropped. The
    one splitter every scope, module path and remat name goes through."""
    if not scope:
        return ()
    frames: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(scope):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "/" and depth == 0:
            frames.append(scope[start:i])
            start = i + 1
    frames.append(scope[start:])
    return tuple(f for f in frames if f)


def scope_prefix(scope: str, depth: int | None) -> str:
    """The first `depth` frames of a scope (all of them when depth is None)."""
    frames = split_scope(scope)
    if not frames:
        return NO_SCOPE
    if depth is not None and depth > 0:
        frames = frames[:depth]
    return "/".join(frames)


def module_path(scope: str, depth: int | None = None) -> str:
    """The model part (the Flax module path, e.g. `stack/Dense_0`): the scope without jax's
    transformation wrappers (jit, jvp, transpose, while/body, checkpoint, ...), so a layer's
    forward, backward and recompute land in one group."""
    path = model_path(scope)
    if not path:
        return NO_MODULE
    if depth is not None and depth > 0:
        path = "/".join(split_scope(path)[:depth])
    return path
