"""A plain stderr progress bar for batch runs: files, MB, rate, ETA, failures. No dependencies.

On a terminal it redraws one line in place; elsewhere (a log file, CI) it prints a full line at
most every `log_interval_s` seconds so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_MB = 1024 * 1024


def format_duration(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    def __init__(
        self,
        total_files: int,
        total_bytes: int,
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        width: int = 24,
        min_interval_s: float = 0.1,
        log_interval_s: float = 10.0,
    ) -> None:
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.files = 0
        self.bytes = 0
        self.failed = 0
        self.cached = 0
        self.start = time.monotonic()
        # Rate and ETA come from analysed files only: cached ones finish instantly and would
        # make the estimate far too hopeful.
        self._work_bytes = 0
        self._work_start: float | None = None
        self._last_draw = float("-inf")  # the first update always draws
        self._interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self._min_interval_s = min_interval_s if self._interactive else log_interval_s
        self._drawn_files = -1

    def update(self, nbytes: int, *, failed: bool = False, cached: bool = False) -> None:
        now = time.monotonic()
        self.files += 1
        self.bytes += nbytes
        self.failed += failed
        self.cached += cached
        if not cached:
            if self._work_start is None:
                self._work_start = self.start
            self._work_bytes += nbytes
        if self.enabled and (now - self._last_draw >= self._min_interval_s or self.files == self.total_files):
            self._draw(now)

    def eta_seconds(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        if self._work_start is None or self._work_bytes == 0:
            return float("nan")
        rate = self._work_bytes / max(now - self._work_start, 1e-9)
        return max(self.total_bytes - self.bytes, 0) / rate

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = now - self.start
        fraction = self.bytes / self.total_bytes if self.total_bytes else (
            self.files / self.total_files if self.total_files else 1.0
        )
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        rate_files = self.files / elapsed if elapsed > 0 else 0.0
        rate_mb = self._work_bytes / _MB / elapsed if elapsed > 0 else 0.0
        extra = []
        if self.cached:
            extra.append(f"{self.cached} cached")
        if self.failed:
            extra.append(f"{self.failed} failed")
        tail = f" ({', '.join(extra)})" if extra else ""
        return (
            f"[{bar}] {self.files}/{self.total_files} files, "
            f"{self.bytes / _MB:.1f}/{self.total_bytes / _MB:.1f} MB, "
            f"{rate_files:.1f} files/s, {rate_mb:.2f} MB/s, "
            f"elapsed {format_duration(elapsed)}, ETA {format_duration(self.eta_seconds(now))}{tail}"
        )

    def _draw(self, now: float) -> None:
        self._last_draw = now
        if self._interactive:
            self.stream.write("\r\x1b[K" + self.line(now))
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()
        self._drawn_files = self.files

    def close(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._interactive:
            self._draw(now)
            self.stream.write("\n")
        elif self._drawn_files != self.files:
            self._draw(now)
        self.stream.flush()
