"""A far end of a connection for the runtime's tests, without a socket:
it sends what a script says when the script says it, and swallows what it
is sent."""

from __future__ import annotations

import trio


class ScriptedPeer(trio.abc.Stream):
    """The far end of a connection: each chunk of ``script`` arrives at its
    virtual time, then nothing more (the peer stays silent, never closes)."""

    def __init__(self, script: list[tuple[float, bytes]]) -> None:
        self.script = list(script)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if not self.script:
            await trio.sleep_forever()
        at_s, chunk = self.script.pop(0)
        await trio.sleep_until(at_s)
        return chunk

    async def send_all(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
