"""Which frame of an op's call stack is the user's: the rule `--by source`, `--by function`,
the loop and conditional locations, the HTML page and the batch database attribute ops by.

jax writes each op's Python call stack into the module (the StackFrames tables). The innermost
frame is often library code: `flax/nnx/nn/linear.py` for every dense layer, `optax/_src/...` for
the optimizer. The frame a user wants is the innermost one that is theirs (`Block.__call__`,
`train_step`). The rule, on the file path alone (the module may come from another machine):

1. a path under one of `user` (a path prefix, or a directory name anywhere in the path) is the
   user's: this overrides everything below (your own package installed into site-packages);
2. else a path that has a `site-packages` or `dist-packages` directory, lies in Python's standard
   library (`.../lib/python3.N/...`, `<frozen ...>`), or goes through a directory named like one
   of `library` (jax, jaxlib, flax, optax, ...: source checkouts and editable installs) is
   library code;
3. everything else is the user's.

The op is attributed to the innermost user frame of its stack; where no frame is the user's,
to its innermost frame (what jax wrote first). `UserCode(user=("mypkg",))` /
`hloflops FILE --user-code mypkg`, and `library=` / `--library`, change the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from hloparse.ir import SourceLocation

# Packages whose frames are never the user's: jax and what is built on it, numpy, and the
# Python tooling that sits in a traceback.
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "equinox", "haiku", "chex", "numpy", "scipy", "orbax",
             "ml_dtypes", "jaxtyping", "typeguard", "treescope", "penzai", "lineax", "optimistix", "diffrax",
             "tensorflow", "keras", "torch", "transformers", "absl")
_INSTALLED = re.compile(r"(^|/)(site-packages|dist-packages)/")
_STDLIB = re.compile(r"(^|/)lib(64)?/python3(\.\d+)?/|(^|/)Lib/|^<frozen ")


@dataclass(frozen=True)
class UserCode:
    """The rule (see the module docstring): `user` paths and names are the user's whatever else
    they are; files in `library` packages, installed packages or the standard library are not."""

    user: tuple[str, ...] = ()
    library: tuple[str, ...] = LIBRARIES

    def with_options(self, user: Iterable[str] = (), library: Iterable[str] = ()) -> UserCode:
        """This rule with more user paths and more library package names."""
        return UserCode(self.user + tuple(user), self.library + tuple(library))

    def is_user(self, file: str) -> bool:
        return _is_user(file.replace("\\", "/"), self.user, self.library)

    def pick(self, stack: Sequence[SourceLocation]) -> SourceLocation | None:
        """The innermost user frame of a stack (innermost first), else its innermost frame."""
        for loc in stack:
            if self.is_user(loc.file):
                return loc
        return stack[0] if stack else None


DEFAULT = UserCode()


@lru_cache(maxsize=65536)  # a module has a few hundred distinct files
def _is_user(path: str, user: tuple[str, ...], library: tuple[str, ...]) -> bool:
    parts = path.split("/")
    for name in user:
        name = name.replace("\\", "/").rstrip("/")
        if path.startswith(name + "/") or path == name or ("/" not in name and name in parts[:-1]):
            return True
    if _INSTALLED.search(path) or _STDLIB.search(path):
        return False
    return not any(part in library for part in parts[:-1])
