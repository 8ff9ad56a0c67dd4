"""The views of an op's call stack by the user's code (hloflops.user_code): the frame `--by source`
and `--by function` group by, and the user's line of a loop or conditional. A mixin of `Report`,
which keeps `module`, `user_code` and the `_picked` cache these read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hloparse.ir import SourceLocation

if TYPE_CHECKING:
    from hloflops.results import Loop, Row
    from hloflops.user_code import UserCode

NO_SOURCE = "(no source)"
FRAMES = ("user", "library", "all")  # which frame of an op's call stack `--by source/function` shows


def location_key(loc: SourceLocation | None) -> str:
    return NO_SOURCE if loc is None else f"{loc.file}:{loc.line}"


def function_key(loc: SourceLocation | None) -> str:
    """`file:Class.method` (the qualified name jax wrote: nnx and Equinox modules are `Block.__call__`)."""
    return NO_SOURCE if loc is None else f"{loc.file}:{loc.function or '?'}"


def _short(key: str, outer: str) -> str:
    """An inner frame's key without the file its outer frame names (`linear.py:422` after
    `model.py:12` keeps its path; `model.py:30` after `model.py:12` becomes `:30`)."""
    file, _, rest = key.rpartition(":")
    return ":" + rest if outer.rpartition(":")[0] == file else key


class SourceViews:
    module: Any
    user_code: UserCode
    _picked: dict[tuple[int, str], tuple[SourceLocation, ...]]

    @property
    def has_stack_frames(self) -> bool:
        """Whether the module has stack-frame tables (call stacks); without them each op has at
        most the one location its metadata names."""
        return self.module is not None and bool(self.module.stack_frames)

    def frames_of(self, loc: SourceLocation | None, frames: str = "user") -> tuple[SourceLocation, ...]:
        """The frames of `loc`'s call stack a view shows: ("user") the innermost user frame,
        ("library") the innermost frame, ("all") both, the user's first (one where they are the
        same). `loc` is a row's source (an instruction's innermost frame)."""
        if frames not in FRAMES:
            raise ValueError(f"frames must be one of {', '.join(FRAMES)}, not {frames!r}")
        if loc is None:
            return ()
        if not loc.frame or self.module is None or frames == "library":
            return (loc,)
        key = (loc.frame, frames)
        found = self._picked.get(key)
        if found is None:
            stack = self.module.stack_frames.stack(loc.frame) or (loc,)
            user = self.user_code.pick(stack)
            found = (user,) if frames == "user" or user is stack[0] else (user, stack[0])
            self._picked[key] = found
        return found

    def user_source(self, loc: SourceLocation | None) -> SourceLocation | None:
        """The user's frame of the call stack whose innermost frame is `loc` (hloflops.user_code)."""
        picked = self.frames_of(loc, "user")
        return picked[0] if picked else None

    def source_key(self, row: Row, by: str = "source", frames: str = "user") -> str:
        """The `--by source` (`file:line`) or `--by function` (`file:function`) key of a row."""
        picked = self.frames_of(row.source, frames)
        if not picked:
            return NO_SOURCE
        key = location_key if by == "source" else function_key
        return " > ".join(key(loc) if i == 0 else _short(key(loc), key(picked[0]))
                          for i, loc in enumerate(picked))

    def instruction_source(self, computation: str, name: str) -> SourceLocation | None:
        """The user's frame of an instruction (a while loop, a conditional), None if unknown."""
        if self.module is None or computation not in self.module.by_name:
            return None
        inst = self.module.by_name[computation].by_name.get(name)
        return None if inst is None else self.user_source(self.module.source_location(inst))

    def loop_location(self, loop: Loop) -> str:
        """The user's `file:line` of a while loop ("" where the module says none)."""
        loc = self.instruction_source(loop.computation, loop.name)
        return f"{loc.file}:{loc.line}" if loc is not None else loop.location

    def loop_function(self, loop: Loop) -> str:
        loc = self.instruction_source(loop.computation, loop.name)
        return loc.function if loc is not None else ""
