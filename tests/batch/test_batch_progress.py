"""The batch progress bar: files, MB, rate and ETA on stderr, readable in logs."""

from __future__ import annotations

import io

from hloflops.batch.progress import Progress, format_duration


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_lines_without_a_terminal() -> None:
    out = io.StringIO()
    bar = Progress(4, 4 * 1024 * 1024, stream=out, log_interval_s=3600)
    bar.update(1024 * 1024)  # the first update draws
    bar.update(1024 * 1024, failed=True)  # within the interval: not drawn
    bar.update(1024 * 1024, cached=True)
    bar.update(1024 * 1024)  # the last file always draws
    bar.close()  # nothing new since the last line
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()
    assert lines[0].startswith("[") and "1/4 files" in lines[0] and "1.0/4.0 MB" in lines[0]
    assert "4/4 files" in lines[1] and "4.0/4.0 MB" in lines[1] and "(1 cached, 1 failed)" in lines[1]
    assert "ETA" in lines[1]


def test_redraws_in_place_on_a_terminal() -> None:
    out = _Tty()
    bar = Progress(2, 200, stream=out, min_interval_s=0)
    bar.update(100)
    bar.update(100)
    bar.close()
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 3 and text.endswith("\n") and "2/2 files" in text


def test_eta_comes_from_analysed_bytes() -> None:
    bar = Progress(3, 300, enabled=False)
    assert format_duration(bar.eta_seconds()) == "--:--"  # nothing analysed yet: no estimate
    bar.update(100, cached=True)
    assert format_duration(bar.eta_seconds()) == "--:--"  # cached files say nothing about speed
    bar.update(100)
    now = bar.start + 10.0  # 100 analysed bytes in 10 s; 100 bytes left
    assert round(bar.eta_seconds(now)) == 10
    assert format_duration(3725) == "1:02:05" and format_duration(65) == "01:05"


def test_disabled_prints_nothing() -> None:
    out = io.StringIO()
    bar = Progress(1, 1, stream=out, enabled=False)
    bar.update(1)
    bar.close()
    assert out.getvalue() == ""
