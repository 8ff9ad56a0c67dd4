"""The one exception hloparse raises for bad input."""

from __future__ import annotations


class HloParseError(ValueError):
    """HLO text that cannot be parsed, or that parses but is inconsistent.

    Attributes: `file` (path or "<string>"), `line` and `column` (1-based), `text` (the offending
    source line), `expected` (what the parser wanted there) and `message` (what went wrong).
    `str(error)` is one line: `file:line:column: message (expected ...)`.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int = 0,
        column: int = 0,
        text: str = "",
        expected: str = "",
    ) -> None:
        # One line, whatever text the message quotes.
        message = " ".join(message.split())
        self.message = message if len(message) <= 300 else message[:297] + "..."
        self.file = file or "<string>"
        self.line = line
        self.column = column
        self.text = text
        self.expected = expected
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        tail = f" (expected {self.expected})" if self.expected else ""
        return f"{where}: {self.message}{tail}"

    def with_file(self, file: str) -> HloParseError:
        return HloParseError(
            self.message, file=file, line=self.line, column=self.column, text=self.text, expected=self.expected
        )


def error_at_end(message: str, text: str, *, file: str | None, expected: str) -> HloParseError:
    """An error about what the text lacks, placed where the text stops: just after its last
    non-blank character (a file cut short is the usual cause, and that is where it was cut)."""
    body = text.rstrip()
    last_line = body[body.rfind("\n") + 1:]
    return HloParseError(message, file=file, line=body.count("\n") + 1, column=len(last_line) + 1,
                         text=last_line.strip(), expected=expected)
