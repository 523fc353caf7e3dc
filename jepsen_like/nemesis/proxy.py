"""The proxy as its own process, so the harness's CPU is not spent on
shuffling bytes::

    python -m jepsen_like.nemesis.proxy --control 127.0.0.1:0 [--link-host 127.0.0.1] [--exit-with-stdin]

When ready it prints one JSON line to stdout, ``{"event": "ready",
"control_host": ..., "control_port": ..., "pid": ...}``, then serves
control requests (see ``_proxy.py``) until a ``shutdown`` request, SIGTERM
or SIGINT. With ``--exit-with-stdin`` it also exits when its stdin reaches
end of file: the harness holds the other end of that pipe, so the proxy
goes away with the harness even when the harness is SIGKILLed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import trio

from ._proxy import serve_proxy


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


async def _serve_then_stop(
    cancel_scope: trio.CancelScope, args: argparse.Namespace, *, task_status: trio.TaskStatus[tuple[object, int]]
) -> None:
    host, port = args.control
    await serve_proxy(host, port, link_host=args.link_host, seed=args.seed, task_status=task_status)
    cancel_scope.cancel()  # a shutdown request: stop the watchers too


async def _exit_on_stdin_eof(cancel_scope: trio.CancelScope) -> None:
    stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stream:
        while await stream.receive_some(4096):
            pass
    logging.getLogger("pykraft.nemesis.proxy").info("stdin closed: the harness is gone, stopping")
    cancel_scope.cancel()


async def _exit_on_signals(cancel_scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            cancel_scope.cancel()
            return


async def _main(args: argparse.Namespace) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_exit_on_signals, nursery.cancel_scope)
        _, port = await nursery.start(_serve_then_stop, nursery.cancel_scope, args)
        ready = {"event": "ready", "control_host": args.control[0], "control_port": port, "pid": os.getpid()}
        print(json.dumps(ready), flush=True)
        if args.exit_with_stdin:
            nursery.start_soon(_exit_on_stdin_eof, nursery.cancel_scope)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jepsen_like.nemesis.proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--control", type=_address, default=("127.0.0.1", 0), help="HOST:PORT of the control socket (port 0: pick one)"
    )
    parser.add_argument("--link-host", default="127.0.0.1", help="address the links listen on")
    parser.add_argument("--seed", type=int, default=0, help="seeds the delay jitter")
    parser.add_argument("--exit-with-stdin", action="store_true", help="exit when stdin reaches end of file")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.WARNING),
        format="%(asctime)s proxy %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    trio.run(_main, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
