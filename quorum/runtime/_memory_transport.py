"""An in-process network for runtimes sharing one trio run (tests, and
single-process prototypes). Messages are handed over at once and in order;
links can be cut to model partitions."""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._messages import Message
from ._runtime import Transport


class MemoryNetwork:
    """Connects ``MemoryTransport``s by node id."""

    def __init__(self) -> None:
        self._endpoints: dict[int, tuple[Callable[[Message], None], Callable[[int], None]]] = {}
        self._blocked: set[tuple[int, int]] = set()
        self.delivered = 0

    def transport(self, node_id: int) -> MemoryTransport:
        return MemoryTransport(self, node_id)

    def isolate(self, node_id: int, others: list[int]) -> None:
        for other in others:
            if other != node_id:
                self._blocked.update({(node_id, other), (other, node_id)})

    def heal(self) -> None:
        self._blocked.clear()

    def _send(self, message: Message) -> None:
        if (message.src, message.dst) in self._blocked:
            return  # a partition drops silently, as iptables DROP does
        endpoint = self._endpoints.get(message.dst)
        if endpoint is None:
            # Nobody listens there: connection refused.
            sender = self._endpoints.get(message.src)
            if sender is not None:
                sender[1](message.dst)
            return
        self.delivered += 1
        endpoint[0](message)


class MemoryTransport(Transport):
    def __init__(self, network: MemoryNetwork, node_id: int) -> None:
        self._network = network
        self.node_id = node_id

    def send(self, message: Message) -> None:
        self._network._send(message)

    async def run(
        self,
        deliver: Callable[[Message], None],
        unreachable: Callable[[int], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        network = self._network
        network._endpoints[self.node_id] = (deliver, unreachable)
        try:
            task_status.started()
            await trio.sleep_forever()
        finally:
            network._endpoints.pop(self.node_id, None)
            # The process is gone: peers' connections to it are reset.
            for peer, (_, peer_unreachable) in sorted(network._endpoints.items()):
                if (self.node_id, peer) not in network._blocked:
                    peer_unreachable(self.node_id)
