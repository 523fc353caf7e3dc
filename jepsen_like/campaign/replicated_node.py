"""Serve a replicated object as one node process of a campaign.

    python -m jepsen_like.campaign.replicated_node --target MODULE:CLASS \\
        --node-id 1 --voters 1@HOST:PORT,... --listen HOST:PORT --data-dir DIR [--import-path DIR]

``MODULE:CLASS`` names a ``quorum.replicated.Replicated`` subclass with a
constructor that takes no arguments; the node runs until SIGTERM (a leader
hands over first) or SIGKILL (the campaign's crash). Plaintext on loopback:
the campaign's proxy sits between every pair of members.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading

from quorum import QuorumError
from quorum.replicated import Replicated

# How often a node checks that the campaign which started it still runs.
ORPHAN_POLL_S = 0.5


def _parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def load_target(spec: str) -> type[Replicated]:
    """The class ``MODULE:CLASS`` names. Raises ``ValueError`` saying what
    is wrong (malformed, not importable, not a ``Replicated`` subclass)."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise ValueError(f"--target must be MODULE:CLASS, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r} for --target: {error}") from None
    target = getattr(module, class_name, None)
    if not (isinstance(target, type) and issubclass(target, Replicated)):
        raise ValueError(f"{spec} is not a quorum.replicated.Replicated subclass")
    return target


def _stop_when_orphaned(parent_pid: int, stop: threading.Event) -> None:
    """Stop when the campaign that started this node is gone (its harness
    was killed): a node must not outlive its run."""
    while not stop.wait(ORPHAN_POLL_S):
        if os.getppid() != parent_pid:
            logging.getLogger("pykraft.campaign").warning("the campaign process %d is gone; stopping", parent_pid)
            stop.set()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jepsen_like.campaign.replicated_node", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="MODULE:CLASS of a Replicated subclass")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--voters", required=True, help="ID@HOST:PORT,... as this node reaches the voters")
    parser.add_argument("--listen", type=_parse_address, required=True, help="HOST:PORT this node listens on")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--import-path", action="append", default=[], help="a directory to import the target from")
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000)
    args = parser.parse_args(argv)
    sys.path[:0] = args.import_path
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    def run() -> None:
        target = load_target(args.target)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        threading.Thread(target=_stop_when_orphaned, args=(os.getppid(), stop), name="orphan-watch", daemon=True).start()
        replica = target().start(
            node_id=args.node_id,
            voters=args.voters,
            listen=args.listen,
            data_dir=args.data_dir,
            plaintext=True,
            quorum={"election_timeout_ms": args.election_timeout_ms, "fetch_timeout_ms": args.fetch_timeout_ms},
        )
        print(f"node {args.node_id} serving {args.target} on {args.listen[0]}:{args.listen[1]}", flush=True)
        try:
            stop.wait()
        finally:
            replica.close()

    try:
        run()
    except (ValueError, TypeError) as error:  # a bad target or setting: one sentence, usage exit code
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except (QuorumError, OSError) as error:  # storage refused, port in use
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
