"""Compiled HLO of tests/programs/sharded_programs.py on 8 host devices, cached on disk.

The device-count flag only works before jax starts, and a pytest process has usually started
jax already (with one CPU device) in some other test, so the programs compile in a subprocess
that sets `XLA_FLAGS=--xla_force_host_platform_device_count=8`; the flag never touches this
process. The cache key holds the device count, the jax and jaxlib versions and the program
file's source, so changing any of them recompiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.programs import sharded_programs
from tests.programs.compile import _write_atomically, cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def _cache_path() -> Path:
    from importlib.metadata import version

    source = Path(sharded_programs.__file__).read_bytes()
    key = "\0".join([f"devices={sharded_programs.DEVICES}", version("jax"), version("jaxlib")]).encode()
    digest = hashlib.sha256(key + b"\0" + source).hexdigest()[:20]
    return cache_dir() / f"sharded-{sharded_programs.DEVICES}dev-{digest}.json"


def compiled_texts(*, use_cache: bool = True) -> dict[str, str]:
    """name -> compiled HLO text of every program in sharded_programs."""
    path = _cache_path()
    if use_cache and path.exists():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass  # torn: compile again
    out = path.with_suffix(".tmp-out")
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    flag = f"--xla_force_host_platform_device_count={sharded_programs.DEVICES}"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "tests.programs.sharded_programs", str(out)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"compiling the sharded programs failed:\n{done.stderr[-3000:]}")
    texts = json.loads(out.read_text())
    out.unlink()
    if use_cache:
        _write_atomically(path, texts)
    return texts
