"""Which computations an instruction calls, and in what role, from its attributes.

One table of XLA's conventions: `calls=` of a fusion, `body=`/`condition=` of a while, the
branches of a conditional, the `to_apply=` of reducers and comparators, custom-call
`called_computations`, async wrappers. Any other opcode carrying one of these attributes is
rejected, as XLA's parser does.
"""

from __future__ import annotations

import re
from typing import Mapping

from hloparse import opcodes
from hloparse.attributes import AttributeSyntaxError, parse_computation_list
from hloparse.ir import CallRole, CallSite

CALL_ATTRIBUTES = frozenset(
    {"calls", "to_apply", "body", "condition", "true_computation", "false_computation",
     "branch_computations", "select", "scatter", "called_computations"}
)
TO_APPLY_OPCODES = frozenset(
    {"reduce", "reduce-window", "map", "scatter", "sort", "all-reduce", "all-reduce-start", "reduce-scatter",
     "scan", "topk", "ragged-all-to-all", "all-to-all", "collective-broadcast"}
)
# The opcodes that name one computation in one attribute, as (attribute, role of the call): the
# usual case, made without the general table below (which costs a fusion 2 us).
_SINGLE_CALLEE = {
    "fusion": ("calls", CallRole.FUSION),
    "call": ("to_apply", CallRole.CALL),
    **{opcode: ("to_apply", CallRole.TO_APPLY) for opcode in TO_APPLY_OPCODES},
}
_ONE_CALLEE = re.compile(r"%[\w.\-]+")


def call_sites(opcode: str, attributes: Mapping[str, str], name: str, wrapped: bool) -> tuple[CallSite, ...]:
    """The computations instruction `name` calls, by role, from its attributes. `wrapped`: the
    instruction is the async-start of the `op-start` shorthand, which calls the computation XLA
    synthesises around the wrapped op. Raises AttributeSyntaxError (offset 0) for a malformed
    list of names or a call attribute the opcode does not take."""
    present = CALL_ATTRIBUTES.intersection(attributes)
    if not present and not wrapped:
        return ()
    single = _SINGLE_CALLEE.get(opcode)
    if single is not None and not wrapped and len(present) == 1:
        callee = attributes.get(single[0])
        if callee is not None and _ONE_CALLEE.fullmatch(callee):  # `calls=%fused_computation.12`
            return (new_call_site(single[1], callee[1:]),)
    sites: list[CallSite] = []

    def names(key: str) -> tuple[str, ...]:
        try:
            return parse_computation_list(attributes[key])
        except AttributeSyntaxError as e:
            raise AttributeSyntaxError(f"{key}: {e}", 0, "computation names") from None

    def unexpected(key: str) -> AttributeSyntaxError:
        return AttributeSyntaxError(f'unexpected attribute "{key}" for {opcode}', 0, "attributes this opcode takes")

    for key in sorted(present):
        if opcode == "fusion" and key == "calls":
            sites += [CallSite(CallRole.FUSION, c) for c in names(key)]
        elif opcode == "while" and key in ("body", "condition"):
            role = CallRole.WHILE_BODY if key == "body" else CallRole.WHILE_CONDITION
            sites += [CallSite(role, c) for c in names(key)]
        elif opcode == "conditional" and key in ("true_computation", "false_computation", "branch_computations"):
            if key == "branch_computations":
                sites += [CallSite(CallRole.BRANCH, c, i) for i, c in enumerate(names(key))]
            else:
                index = 0 if key == "true_computation" else 1
                sites += [CallSite(CallRole.BRANCH, c, index) for c in names(key)]
        elif opcode == "call" and key in ("to_apply", "calls"):
            sites += [CallSite(CallRole.CALL, c) for c in names(key)]
        elif opcode == "async-start" and key == "calls":
            if not wrapped:
                sites += [CallSite(CallRole.ASYNC, c) for c in names(key)]
        elif opcode in ("async-update", "async-done") and key == "calls":
            pass  # the same computation as its async-start's: executed there, not again here
        elif opcode == "custom-call" and key in ("called_computations", "to_apply", "calls"):
            sites += [CallSite(CallRole.CUSTOM_CALL, c, i) for i, c in enumerate(names(key))]
        elif opcode == "select-and-scatter" and key in ("select", "scatter"):
            sites += [CallSite(CallRole.TO_APPLY, c, 0 if key == "select" else 1) for c in names(key)]
        elif key == "to_apply" and opcode in TO_APPLY_OPCODES:
            sites += [CallSite(CallRole.TO_APPLY, c) for c in names(key)]
        elif opcode in ("async-start",) and wrapped:
            pass  # attributes of the wrapped op; the wrapped op owns the call
        elif not opcodes.is_known(opcode):
            sites += [CallSite(CallRole.TO_APPLY, c) for c in names(key)]  # newer op: keep the edge
        else:
            raise unexpected(key)
    if wrapped:
        sites.insert(0, CallSite(CallRole.ASYNC, wrapped_computation_name(name)))
    if opcode in ("select-and-scatter", "conditional"):
        sites.sort(key=lambda s: s.index)  # branch 0 (true) before branch 1 (false), as XLA stores them
    return tuple(sites)


def wrapped_computation_name(start_name: str) -> str:
    return f"{start_name}.async_wrapped"


def new_call_site(role: CallRole, computation: str, index: int = 0) -> CallSite:
    """CallSite(...) without the frozen dataclass's per-field object.__setattr__."""
    site = _new(CallSite)
    _set_role(site, role)
    _set_callee(site, computation)
    _set_index(site, index)
    return site


_new = object.__new__
_set_role, _set_callee, _set_index = (CallSite.__dict__[field].__set__ for field in ("role", "computation", "index"))
