"""The stack-frame tables of a module's header (FileNames, FunctionNames, FileLocations,
StackFrames) -> StackFrames, which turns an instruction's stack_frame_id into file:line."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from hloparse.attributes import unquote
from hloparse.ir import StackFrames
from hloparse.statements import Statement

# Rows as XLA prints them (other spellings take a slower, general path).
_LOCATION_ROW = re.compile(
    r"\{file_name_id=(\d+) function_name_id=(\d+) line=(\d+) end_line=(\d+) column=(\d+) end_column=(\d+)\}")
_FRAME_ROW = re.compile(r"\{file_location_id=(\d+) parent_frame_id=(\d+)\}")
_LOCATION_FIELDS = ("file_name_id", "function_name_id", "line", "end_line", "column", "end_column")
_FRAME_FIELDS = ("file_location_id", "parent_frame_id")


def stack_frames(tables: Mapping[str, Sequence[Statement]]) -> StackFrames:
    """The tables' rows (`1 {file_name_id=1 ...}`, `1 "model.py"`), by table name."""
    if not tables:
        return StackFrames()
    locations = tuple(_fields(row, _LOCATION_FIELDS, _LOCATION_ROW) for row in _rows(tables, "FileLocations"))
    frames = tuple(_fields(row, _FRAME_FIELDS, _FRAME_ROW) for row in _rows(tables, "StackFrames"))
    return StackFrames(_names(tables, "FileNames"), _names(tables, "FunctionNames"),
                       locations, frames)  # type: ignore[arg-type]


def _rows(tables: Mapping[str, Sequence[Statement]], table: str) -> list[str]:
    """Each row's text after its leading number."""
    return [st.text.strip().partition(" ")[2].strip() for st in tables.get(table, ())]


def _names(tables: Mapping[str, Sequence[Statement]], table: str) -> tuple[str, ...]:
    return tuple(unquote(row) for row in _rows(tables, table))


def _fields(row: str, keys: tuple[str, ...], as_printed: re.Pattern[str]) -> tuple[int, ...]:
    m = as_printed.fullmatch(row)
    if m is not None:
        return tuple(map(int, m.groups()))
    found = dict(re.findall(r"(\w+)=(-?\d+)", row))  # fields reordered, missing or negative
    return tuple(int(found.get(k, 0)) for k in keys)
