"""What `Report.to_dict()` says for every corpus module and bundled example, as recorded.

The golden file holds, per module, the sha256 of `to_json()` (the `--json` output) and of
`to_json(rows=True, by=every key)` (every row and every grouping), plus the headline totals so
that a mismatch says what moved. It is written by `python3 -m tests.support.golden_outputs
--write` and read by `tests/report/test_golden_outputs.py`: a change that moves any output must
rewrite it, on purpose, in the same commit, and say why.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from tests.support.corpus import CORPUS_DIR, have_corpus, missing_reason

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "examples"
GOLDEN_PATH = REPO_ROOT / "tests" / "data" / "golden_outputs.jsonl.gz"
ALL_GROUPINGS = ("opcode", "computation", "scope", "source", "module")


def module_paths() -> Iterator[tuple[str, Path]]:
    """(key, path) for every bundled example and every corpus module, in a fixed order."""
    for path in sorted(EXAMPLES_DIR.glob("*.hlo")):
        yield f"examples/{path.name}", path
    for path in sorted(CORPUS_DIR.rglob("*.hlo")):
        rel = path.relative_to(CORPUS_DIR).as_posix()
        if not rel.startswith("_malformed/"):
            yield f"corpus/{rel}", path


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json(report: Any, key: str, **options: Any) -> str:
    """`report.to_json(**options)` with the module's path replaced by its key, so that the
    hashes do not depend on where the checkout and the corpus lie."""
    out = report.to_dict(**options)
    out["path"] = key
    return json.dumps(out, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


def outputs_of(key: str, path: Path) -> dict[str, Any]:
    """The record for one module: hashes of its outputs, or the error it raises."""
    from hloflops import analyze
    from hloparse import HloParseError

    try:
        report = analyze(str(path))
    except HloParseError as error:
        return {"error": f"HloParseError at {error.line}:{error.column}"}
    return {
        "json": _sha(_json(report, key)),
        "full": _sha(_json(report, key, rows=True, by=ALL_GROUPINGS)),
        "flops": report.flops,
        "bytes_accessed": report.bytes_accessed,
        "remat_flops": report.remat_flops,
    }


def read_golden(path: Path = GOLDEN_PATH) -> dict[str, dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {rec.pop("key"): rec for rec in map(json.loads, f)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden file")
    parser.add_argument("--check", action="store_true", help="compare with the golden file, print differences")
    args = parser.parse_args(argv)
    if not have_corpus():  # a record of the examples alone would read as every corpus module gone
        parser.error(missing_reason())
    golden = read_golden() if args.check else {}
    records, differ = [], 0
    for key, path in module_paths():
        rec = outputs_of(key, path)
        records.append({"key": key, **rec})
        if args.check and golden.get(key) != rec:
            differ += 1
            print(f"{key}: was {golden.get(key)} now {rec}")
    if args.write:
        GOLDEN_PATH.parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(GOLDEN_PATH, "wb", mtime=0) as raw:
            for rec in records:
                raw.write((json.dumps(rec, sort_keys=True) + "\n").encode("utf-8"))
        print(f"wrote {len(records)} records to {GOLDEN_PATH}")
    if args.check:
        missing = set(golden) - {r["key"] for r in records}
        print(f"{len(records)} modules, {differ} differ, {len(missing)} missing")
        return 1 if differ or missing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
