"""One PySyncObj voter plus a tiny TCP front for the benchmark client.

    python -m bench.peers.pysyncobj_server --self-port P --partner-ports P2,P3 \\
        --front-port F --data-dir DIR [--batching on|off] [--msync-each-append]

The replicated object is a dict of key -> value bytes with two replicated
methods: `put(key, value)` (one log entry) and `put_batch(items)` (one log
entry carrying all items).

Durability as PySyncObj 0.3.17 ships it (read from its source,
pysyncobj/journal.py): with `journalFile` set, every log entry is written
into an mmap'ed file (FileJournal/ResizableFile) and nothing calls fsync,
fdatasync or msync on the write path (`FileJournal.flush()` exists but
SyncObj never calls it); term/vote metadata goes to a `.meta` file written
with `f.flush()` and a rename, also without fsync.  So entries survive a
process kill -9 (the page cache holds them) but not a power loss.
`--msync-each-append` patches FileJournal.add to msync the mapping after
every appended entry (the closest thing to "fsync on"); it is off unless asked.

Front protocol (all integers big-endian), one TCP connection can pipeline:
  request  = u32 frame_len | u32 request_id | u8 op | payload
  response = u32 frame_len | u32 request_id | u8 status (0 ok, 1 error) | payload
  op 1 PUT:    payload = u16 key_len | key | value            -> payload empty
  op 2 BATCH:  payload = u32 count | count * (u16 key_len | key | u32 value_len | value)
  op 3 STATUS: payload empty -> JSON {"leader": "host:port"|null, "self", "state", "has_quorum", ...}
Errors carry a UTF-8 reason (PySyncObj FAIL_REASON name).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import struct
import sys
from pathlib import Path

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

OP_PUT = 1
OP_BATCH = 2
OP_STATUS = 3
STATUS_OK = 0
STATUS_ERROR = 1
HEADER = struct.Struct(">IIB")  # frame_len, request_id, op/status
FAIL_REASON_NAMES = {getattr(FAIL_REASON, n): n for n in dir(FAIL_REASON) if n.isupper()}


class BenchStore(SyncObj):
    def __init__(self, self_address: str, partner_addresses: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_address, partner_addresses, conf)
        self.__data: dict[str, bytes] = {}
        self.__records = 0

    @replicated
    def put(self, key: str, value: bytes) -> int:
        self.__data[key] = value
        self.__records += 1
        return self.__records

    @replicated
    def put_batch(self, items: list[tuple[str, bytes]]) -> int:
        for key, value in items:
            self.__data[key] = value
        self.__records += len(items)
        return self.__records


def patch_msync_each_append() -> None:
    from pysyncobj import journal

    original_add = journal.FileJournal.add

    def add_then_msync(self, command, idx, term):  # noqa: ANN001, ANN202
        original_add(self, command, idx, term)
        self.flush()  # ResizableFile.flush -> mmap.flush() -> msync(MS_SYNC)

    journal.FileJournal.add = add_then_msync


def _decode_batch(payload: bytes) -> list[tuple[str, bytes]]:
    (count,) = struct.unpack_from(">I", payload, 0)
    offset = 4
    items = []
    for _ in range(min(count, 100_000)):
        (key_len,) = struct.unpack_from(">H", payload, offset)
        offset += 2
        key = payload[offset : offset + key_len].decode()
        offset += key_len
        (value_len,) = struct.unpack_from(">I", payload, offset)
        offset += 4
        items.append((key, payload[offset : offset + value_len]))
        offset += value_len
    return items


def _status(store: BenchStore) -> dict:
    status = store.getStatus()
    leader = status.get("leader")
    return {
        "leader": leader.address if leader is not None else None,
        "self": status["self"].address,
        "state": status["state"],
        "has_quorum": bool(status["has_quorum"]),
        "raft_term": status["raft_term"],
        "commit_idx": status["commit_idx"],
        "last_applied": status["last_applied"],
        "log_len": status["log_len"],
    }


async def serve(store: BenchStore, front_port: int) -> None:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def respond(request_id: int, status: int, payload: bytes = b"") -> None:
            if not writer.is_closing():
                writer.write(HEADER.pack(HEADER.size - 4 + len(payload), request_id, status) + payload)

        def callback_for(request_id: int):  # noqa: ANN202
            # Runs on PySyncObj's tick thread; hop back to the event loop.
            def done(_result, error) -> None:  # noqa: ANN001
                if error == FAIL_REASON.SUCCESS:
                    loop.call_soon_threadsafe(respond, request_id, STATUS_OK)
                else:
                    reason = FAIL_REASON_NAMES.get(error, str(error)).encode()
                    loop.call_soon_threadsafe(respond, request_id, STATUS_ERROR, reason)

            return done

        try:
            while True:
                head = await reader.readexactly(4)
                (frame_len,) = struct.unpack(">I", head)
                frame = await reader.readexactly(frame_len)
                request_id, op = struct.unpack_from(">IB", frame, 0)
                payload = frame[5:]
                if op == OP_PUT:
                    (key_len,) = struct.unpack_from(">H", payload, 0)
                    key = payload[2 : 2 + key_len].decode()
                    store.put(key, payload[2 + key_len :], callback=callback_for(request_id))
                elif op == OP_BATCH:
                    store.put_batch(_decode_batch(payload), callback=callback_for(request_id))
                elif op == OP_STATUS:
                    respond(request_id, STATUS_OK, json.dumps(_status(store)).encode())
                else:
                    respond(request_id, STATUS_ERROR, b"unknown op")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", front_port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-port", type=int, required=True)
    parser.add_argument("--partner-ports", required=True, help="comma-separated raft ports of the others")
    parser.add_argument("--front-port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--batching", choices=["on", "off"], default="off")
    parser.add_argument("--msync-each-append", action="store_true")
    args = parser.parse_args(argv)

    if args.msync_each_append:
        patch_msync_each_append()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    conf = SyncObjConf(
        journalFile=str(args.data_dir / "journal.bin"),
        fullDumpFile=str(args.data_dir / "dump.bin"),
        appendEntriesUseBatch=args.batching == "on",
        dynamicMembershipChange=False,
    )
    partners = [f"127.0.0.1:{port}" for port in args.partner_ports.split(",") if port]
    store = BenchStore(f"127.0.0.1:{args.self_port}", partners, conf)
    print(f"pysyncobj voter 127.0.0.1:{args.self_port} front 127.0.0.1:{args.front_port} "
          f"batching={args.batching} msync_each_append={args.msync_each_append}", flush=True)
    try:
        asyncio.run(serve(store, args.front_port))
    finally:
        store.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
