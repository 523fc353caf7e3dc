"""``python -m jepsen_like.nemesis``: find and remove what a killed run left.

    python -m jepsen_like.nemesis leftovers pk-1a2b3c-
    python -m jepsen_like.nemesis cleanup pk-1a2b3c-

(A proxy process needs no cleanup: it exits when its harness dies.)
"""

from __future__ import annotations

import argparse
import json
import sys

from ._netns import cleanup_leftovers, leftovers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jepsen_like.nemesis", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["leftovers", "cleanup"])
    parser.add_argument("prefix", help="the run's prefix, pk-<run id>-")
    args = parser.parse_args(argv)
    try:
        if args.action == "leftovers":
            print(json.dumps(leftovers(args.prefix)))
        else:
            print(json.dumps({"removed": cleanup_leftovers(args.prefix)}))
    except Exception as error:  # noqa: BLE001 - one sentence for the user
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
