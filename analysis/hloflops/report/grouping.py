"""The grouped tables of a report (`Report.group_by`): rows summed by opcode, computation,
scope, Flax module path, or the user's source line or function (whose keys the report's
call-stack views give: report/sources.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hloflops.cost.costs import Cost
from hloflops.cost.kernels import op_group
from hloflops.results import Row
from hloflops.report.sources import function_key, location_key
from hloflops.scopes import module_path, scope_prefix

GROUP_KEYS = ("opcode", "computation", "scope", "source", "function", "module")


def group_key(row: Row, by: str, depth: int | None = None) -> str:
    if by == "opcode":
        return op_group(row.opcode, row.target)  # fused attention: a line of its own
    if by == "computation":
        return row.computation
    if by == "scope":
        return scope_prefix(row.scope, depth)
    if by == "source":
        return location_key(row.source)
    if by == "function":
        return function_key(row.source)
    if by == "module":
        return module_path(row.scope, depth)
    raise ValueError(f"cannot group by {by!r}; choose one of {', '.join(GROUP_KEYS)}")


@dataclass(frozen=True, slots=True)
class Group:
    """One line of a grouped table: the rows sharing a key, summed over all their executions."""

    key: str
    total: Cost
    remat_flops: int
    instructions: int  # how many instructions (rows) fall in the group
    executions: int  # sum of their execution counts
    uncounted: int  # how many of them have an unknown cost

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.total.as_dict(),
            "remat_flops": self.remat_flops,
            "instructions": self.instructions,
            "executions": self.executions,
            "uncounted": self.uncounted,
        }


def row_keys(rows: tuple[Row, ...], by: str, depth: int | None) -> list[str]:
    """`group_key` of every row, worked out once per distinct value it reads (rows share their
    scopes, opcodes and source lines: a large module has a few thousand of each)."""
    if by == "computation":
        return [row.computation for row in rows]
    if by == "opcode":
        values: list[Any] = [(row.opcode, row.target) for row in rows]
        keyed = {value: op_group(*value) for value in set(values)}
    elif by in ("scope", "module"):
        values = [row.scope for row in rows]
        of = scope_prefix if by == "scope" else module_path
        keyed = {value: of(value, depth) for value in set(values)}
    elif by in ("source", "function"):  # the innermost frame; the report passes the user's frame's keys
        values = [row.source for row in rows]
        of = location_key if by == "source" else function_key
        keyed = {value: of(value) for value in set(values)}
    else:
        raise ValueError(f"cannot group by {by!r}; choose one of {', '.join(GROUP_KEYS)}")
    return list(map(keyed.__getitem__, values))


def grouped(rows: tuple[Row, ...], by: str, depth: int | None, keys: list[str] | None = None) -> tuple[Group, ...]:
    """`Report.group_by`: the rows of each key (`keys`, else `row_keys`) gathered first, then each
    group summed by comprehensions (a Cost added per row was most of the grouping on a large module)."""
    members: dict[str, list[Row]] = {}
    for key, row in zip(row_keys(rows, by, depth) if keys is None else keys, rows):
        same = members.get(key)
        if same is None:
            members[key] = [row]
        else:
            same.append(row)
    groups = []
    for key, same in members.items():
        totals = [row.total for row in same]
        flops = [t.flops for t in totals]
        groups.append(Group(key, Cost(sum(flops), sum([t.transcendentals for t in totals]),
                                      sum([t.bytes_accessed for t in totals])),
                            sum([row.remat_flops for row in same if row.remat]), len(same),
                            sum([row.executions for row in same]),
                            sum([1 for row in same if row.uncounted])))
    groups.sort(key=lambda g: (-g.total.flops, -g.total.bytes_accessed, g.key))
    return tuple(groups)
