"""Where `hloflops DIR` keeps its database when no `--db` is given: a per-user cache directory, by
the platform's convention, never the current directory (a batch run must not leave files where
the user did not ask for them).

- `HLOFLOPS_CACHE_DIR`, when set, is the directory (any platform).
- Linux, BSD and other Unix: `$XDG_CACHE_HOME/hloflops` (an absolute `XDG_CACHE_HOME` only, as
  the XDG base directory specification says), else `~/.cache/hloflops`.
- macOS: `~/Library/Caches/hloflops`.
- Windows: `%LOCALAPPDATA%\\hloflops\\Cache`, else `~\\AppData\\Local\\hloflops\\Cache`.

One database serves every run: its rows are keyed by the module file's absolute path and reused
only while the file's content hash and the engine version are unchanged, so runs over different
directories share it without mixing their results.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

CACHE_DIR_ENV = "HLOFLOPS_CACHE_DIR"
DEFAULT_DB_NAME = "batch.sqlite"
APP = "hloflops"


def user_cache_dir(env: Mapping[str, str] | None = None, platform: str | None = None,
                   home: Path | None = None) -> Path:
    """hloflops' per-user cache directory (not created here); `env`, `platform` (sys.platform's
    spelling) and `home` are the process's own unless given (tests give them)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    override = env.get(CACHE_DIR_ENV)
    if override:
        return Path(override).expanduser()
    home = _home(env, platform) if home is None else home
    if platform == "darwin":
        return home / "Library" / "Caches" / APP
    if platform.startswith(("win32", "cygwin")):
        local = env.get("LOCALAPPDATA")
        base = Path(local) if local else home / "AppData" / "Local"
        return base / APP / "Cache"
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else home / ".cache"  # a relative one is to be ignored
    return base / APP


def default_db_path(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The batch database used when `--db` is not given."""
    return user_cache_dir(env, platform) / DEFAULT_DB_NAME


def _home(env: Mapping[str, str], platform: str) -> Path:
    # HOME first, as os.path.expanduser does on POSIX; USERPROFILE on Windows.
    key = "USERPROFILE" if platform.startswith("win32") else "HOME"
    value = env.get(key)
    return Path(value) if value else Path.home()
