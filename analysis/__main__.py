"""`python -m crawdad.analysis RUN_DIR [RUN_DIR ...] --out OUT`: write the report of one or more runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from crawdad.analysis.report import write_report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m crawdad.analysis", description=__doc__)
    ap.add_argument(
        "runs", nargs="+", type=Path, help="run folders (manifest.json + debates.jsonl)"
    )
    ap.add_argument("--out", type=Path, required=True, help="report folder to write")
    args = ap.parse_args(argv)
    path = write_report(list(args.runs), args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
