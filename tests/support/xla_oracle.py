"""XLA's own parser as the oracle for what hloparse accepts: jaxlib's `hlo_module_from_text`.

XLA aborts the whole process on some CHECKs (a reshape whose element count differs), so the texts
go to a child process one by one; a child that dies is recorded as a rejection ("abort") and a new
child takes the rest. Also the corpus mutants of the differential fuzz (`mutants`), shared by
`tests/untrusted/test_hostile_xla_acceptance.py` and `benchmarks/xla_differential_fuzz.py`.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

_CHILD = r"""
import json, sys
from hloflops.xla.compare import hlo_module_from_text
for line in sys.stdin:
    text = json.loads(line)
    try:
        hlo_module_from_text(text)
        verdict = "accept"
    except Exception as e:
        verdict = "reject: " + " ".join(str(e).split())[:300]
    sys.stdout.write(json.dumps(verdict) + "\n")
    sys.stdout.flush()
"""


def have_xla() -> bool:
    try:
        import jaxlib  # noqa: F401  (hloflops.xla.compare.hlo_module_from_text finds XLA's parser in it)
    except Exception:
        return False
    return True


def xla_verdicts(texts: list[str], timeout: float = 60.0) -> list[str]:
    """For each text, "accept" or "reject: <XLA's message>" ("reject: abort" for a CHECK failure)."""
    verdicts: list[str] = []
    while len(verdicts) < len(texts):
        child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        assert child.stdin is not None and child.stdout is not None
        try:
            for text in texts[len(verdicts):]:
                child.stdin.write(json.dumps(text) + "\n")
                child.stdin.flush()
                answer = child.stdout.readline()
                if not answer:
                    verdicts.append("reject: abort")  # XLA's CHECK killed the process: it cannot hold this
                    break
                verdicts.append(json.loads(answer))
        finally:
            child.kill()
            child.wait(timeout)
    return verdicts


def our_verdict(text: str) -> str:
    import hloparse

    try:
        hloparse.parse(text)
    except hloparse.HloParseError as e:
        return f"reject: {e}"
    return "accept"


_PUNCTUATION = list("{}()[],=%:\"'/*#<>?@ \n") + ["/*", "*/", "ROOT ", "->", "0", "-1", "99999999999999999999"]


def mutate(text: str, rng: random.Random) -> str:
    """One small edit of the kinds a careless copy or an attacker makes."""
    lines = text.split("\n")
    kind = rng.randrange(8)
    if kind == 0 and len(lines) > 2:
        del lines[rng.randrange(len(lines))]
    elif kind == 1:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == 2:
        i = rng.randrange(len(text))
        return text[:i] + text[i + 1:]
    elif kind == 3:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(_PUNCTUATION) + text[i:]
    elif kind == 4:  # a number changed
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        if digits:
            i = rng.choice(digits)
            return text[:i] + str(rng.choice([0, 1, 2, 7, 9])) + text[i + 1:]
    elif kind == 5:  # two tokens swapped
        words = text.split(" ")
        if len(words) > 3:
            i, j = rng.randrange(len(words)), rng.randrange(len(words))
            words[i], words[j] = words[j], words[i]
            return " ".join(words)
    elif kind == 6:  # cut short
        return text[: rng.randrange(1, len(text))]
    else:  # an attribute dropped
        i = rng.randrange(len(lines))
        if ", " in lines[i]:
            head, _, _ = lines[i].rpartition(", ")
            lines[i] = head
    return "\n".join(lines)


def mutants(seeds: list[str], count: int, seed: int = 12) -> list[str]:
    rng = random.Random(seed)
    return [mutate(rng.choice(seeds), rng) for _ in range(count)]
