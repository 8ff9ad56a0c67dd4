"""Where in the text an instruction or a computation heading lies, for the checks that run after
the statements are read (hloparse.validate, hloparse.infer) to point their errors there. The
parser's builder provides it; the checks depend on this protocol, not on the parser."""

from __future__ import annotations

from typing import Any, Protocol

from hloparse.errors import HloParseError
from hloparse.ir import Instruction, Shape


class SourceLocator(Protocol):
    def error_at_instruction(self, inst: Instruction, message: str, expected: str = "",
                             needle: str | None = None) -> HloParseError:
        """An error at the instruction's line (at `needle` in it, where given)."""

    def error_at_result_shape(self, name: str, message: str, expected: str) -> HloParseError:
        """An error at the `-> shape` of a computation's heading."""

    def result_shape_of(self, name: str) -> Shape | None:
        """The `-> shape` a computation's heading declares, if any."""

    def signature_of(self, name: str) -> Any:
        """(statement, parameter shapes, result shape) of a computation's heading, if known."""
