"""The receive path's own cost: one ``TcpTransport`` reads frames one at a
time from a socket pair (each frame sent when the reader waits again, as on
a connection carrying one exchange at a time), on an inbound client
connection (idle deadline) and on a voter's (none between frames):

    PYTHONPATH=<tree> .venv/bin/python bench/read_path_calls.py --calls [--tls]
    PYTHONHASHSEED=0 PYTHONPATH=<tree> valgrind --tool=cachegrind --cache-sim=no \\
        .venv/bin/python bench/read_path_calls.py --frames COUNT [--tls]

``--calls`` prints the Python function calls (and calls of C functions) per
frame read, counted with ``sys.setprofile``. Without it the reads run
unobserved, for instruction counts: the difference of two runs with
different COUNTs, divided by the difference, is the count per frame with
start-up cancelled out. With ``--tls`` both ends are ``TlsStream``s (the
sender's encryption is counted too: the same in every tree). Each frame is a VoteRequest for another node,
dropped with a (disabled) log line after it is decoded. Run as a file, so
that it imports the ``quorum`` of the tree on ``PYTHONPATH``; it uses only
what main had on 2026-11-26, so the same script measures that tree.
docs/benchmarks.md, "The read path's wake-ups", has figures.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import tempfile
from pathlib import Path

import trio
import trio.testing

from quorum import VoteRequest
from quorum.runtime import TcpTransport, TlsConfig, create_cluster_certificates
from quorum.runtime._tcp import _Connection

CLUSTER = "read-path"


async def read_frames(frames: int, from_voter: bool, calls: dict[str, int] | None, certs: Path | None) -> None:
    near_socket, far_socket = socket.socketpair()
    near = trio.SocketStream(trio.socket.from_stdlib_socket(near_socket))
    far = None
    if certs is not None:
        def tls(stem: str) -> TlsConfig:
            return TlsConfig(certs / "ca.pem", certs / f"{stem}.pem", certs / f"{stem}-key.pem")

        near = tls("node-1").wrap_server(near)
        far = tls("node-2").wrap_client(trio.SocketStream(trio.socket.from_stdlib_socket(far_socket)))
        async with trio.open_nursery() as handshakes:
            handshakes.start_soon(near.do_handshake)
            handshakes.start_soon(far.do_handshake)
    transport = TcpTransport(1, cluster_id=CLUSTER, listen=None, peer_addresses={})
    connection = _Connection(near, "peer", CLUSTER, transport.limits)
    connection.from_voter = from_voter
    frame = connection.encode(VoteRequest(src=7, dst=9, epoch=1, last_epoch=0, end_offset=0, pre_vote=True))

    def count(_frame: object, event: str, _arg: object) -> None:
        if event in calls:
            calls[event] += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport._read_frames, connection, nursery)
        await trio.testing.wait_all_tasks_blocked()
        if calls is not None:
            sys.setprofile(count)
        for _ in range(frames):
            if far is None:
                far_socket.send(frame)
            else:
                await far.send_all(frame)
            await trio.testing.wait_all_tasks_blocked()
        sys.setprofile(None)
        nursery.cancel_scope.cancel()
    far_socket.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--calls", action="store_true", help="count Python calls per frame")
    parser.add_argument("--tls", action="store_true", help="over TlsStreams (mutual TLS)")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    # The test certificates and keys live only as long as the run.
    with tempfile.TemporaryDirectory(prefix="read-path-certs-") as scratch:
        certs = None
        if args.tls:
            certs = Path(scratch)
            create_cluster_certificates(certs, nodes=[1, 2], clients=[])
        for from_voter in (False, True):
            calls = {"call": 0, "c_call": 0} if args.calls else None
            trio.run(read_frames, args.frames, from_voter, calls, certs)
            if calls is not None:
                name = "voter " if from_voter else "client"
                print(f"{name} connection: {calls['call'] / args.frames:.1f} Python calls, "
                      f"{calls['c_call'] / args.frames:.1f} C calls per frame read")  # fmt: skip


if __name__ == "__main__":
    main()
