"""``python -m jepsen_like.report RUN_DIR [--out FILE]``: write a run's report.html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._html import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jepsen_like.report",
        description="Write report.html for a campaign run directory (one self-contained page that opens offline).",
    )
    parser.add_argument("run_dir", type=Path, help="a run directory, e.g. store/latest")
    parser.add_argument("--out", type=Path, default=None, help="where to write the page (default: RUN_DIR/report.html)")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        parser.error(f"{args.run_dir} is not a directory")
    try:
        out = write_report(args.run_dir, args.out)
    except OSError as error:
        print(f"cannot write the report: {error}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
