"""The syntax XLA's parser demands of a `sharding={...}` attribute (`ParseSharding` in
`hlo_parser.cc`): its keywords spelt right, no stray characters, `device=` an integer. Values are
not interpreted (the cost rules do not use them; XLA's parser does not check an iota list's length
against the tiles either), nor is the named-axis form of newer XLAs checked. Each rule was put to
XLA (tests/untrusted/test_hostile_xla_acceptance.py).
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?')  # an unterminated one runs to the end
_COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)
_METADATA = re.compile(r"metadata=\{[^{}]*\}")
# Every token a sharding may hold once strings, comments and metadata are gone.
_TOKEN = re.compile(r"\s+|[{}\[\],()=]|<=|-?\d+|[A-Za-z_][\w.\-]*")
_KEYWORDS = frozenset({
    "replicated", "maximal", "manual", "unknown", "unreduced", "device", "devices", "last_tile_dim_replicate",
    "last_tile_dims", "shard_as", "shard_like", "T", "metadata",
})
_DEVICE = re.compile(r"\bdevice=(?!\s*-?\d)")


def sharding_error(value: str) -> str | None:
    """Why XLA's parser rejects this sharding, or None."""
    if "mesh[" in value:
        return None  # the named-axis form of a newer XLA (`{mesh['x'=2] [{'x'}]}`): read, not checked
    text = _METADATA.sub(" ", _COMMENT.sub(" ", _STRING.sub('""', value)))
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            break
        word = m.group()
        if (word[0].isalpha() or word[0] == "_") and word not in _KEYWORDS:
            return f"unexpected word {word[:40]!r} in sharding"
        pos = m.end()
    if pos != len(text):
        return f"unexpected text {text[pos:pos + 20]!r} in sharding"
    if _DEVICE.search(text):
        return "device= attribute must be an integer"
    return None
