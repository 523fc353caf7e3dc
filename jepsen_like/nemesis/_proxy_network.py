"""The default backend: every link through a userspace proxy process.

Each node listens on ``node_host`` (127.0.0.1) at a port of its own. For
every directed pair that carries traffic, (node → node) and (client →
node), the proxy has one *link*, a port on ``proxy_host`` (127.0.0.2 by
default, so link ports can never collide with node ports) that forwards to
the destination node. ``address_for(src, dst)`` is that link's port, so
each node gets its own ``--voters`` map and each client its own bootstrap
list. Because a node opens its own outbound connection to every peer, link
``(src, dst)`` carries what src sends to dst on src's connection (its a→b
direction) and what dst answers on it (b→a).

A cut pair ``(src, dst)`` therefore stalls link (src, dst) a→b and link
(dst, src) b→a: nothing src sends reaches dst, on either connection.

Nodes of the roles in ``per_source_listener_roles`` get one more port per
member that links to them (``source_listen_address``), and each member's
link forwards to its own: a system that tells its peers and clients where
to reconnect (Kafka advertises one address per listener name: a broker
answers a client with the addresses of the listener it came in on, a
controller leader sends its controller listeners to the other nodes) can
then advertise each member its own links, so that every path stays
cuttable on its own.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ._errors import NemesisError
from ._proxy import link_mode_for
from ._proxy_client import ProxyClient
from ._topology import CutKind, Member, MemberId, NetworkTopology, NodeId

DEFAULT_NODE_HOST = "127.0.0.1"
DEFAULT_PROXY_HOST = "127.0.0.2"


class ProxyNetwork(NetworkTopology):
    """Nodes and clients on loopback, every link through one proxy process.

    ::

        with ProxyNetwork() as net:
            net.add_node(1, "controller", zone="az1")
            net.add_client("c1", zone="az1")
            argv = ["kraft-quorum", "node", "--plaintext", "--node-id", "1",
                    "--voters", net.voters_arg(1), "--listen", "%s:%d" % net.listen_address(1)]
            net.isolate(1)
    """

    backend_name = "proxy"

    def __init__(
        self,
        run_id: str | None = None,
        *,
        node_host: str = DEFAULT_NODE_HOST,
        proxy_host: str = DEFAULT_PROXY_HOST,
        proxy_stderr: str | os.PathLike[str] | None = None,
        seed: int = 0,
        per_source_listener_roles: tuple[str, ...] = (),
    ) -> None:
        """Nothing starts until ``open()`` (or ``with``).

        Raises ``ValueError`` for a malformed ``run_id``."""
        super().__init__(run_id)
        self.per_source_listener_roles = tuple(per_source_listener_roles)
        self._source_listen: dict[tuple[MemberId, NodeId], tuple[str, int]] = {}  # (src, node) -> src's own port
        self.node_host = node_host
        self.proxy_host = proxy_host
        self.proxy_stderr = proxy_stderr
        self.seed = seed
        self.proxy: ProxyClient | None = None
        self._listen: dict[NodeId, tuple[str, int]] = {}
        self._links: dict[tuple[MemberId, MemberId], tuple[str, int]] = {}  # (src, dst) -> (name, port)
        self._applied: dict[str, dict[str, Any]] = {}
        self._closed = False

    def open(self) -> ProxyNetwork:
        """Start the proxy process. Raises ``ProxyError`` when it does not
        start, ``NemesisError`` after ``close()``."""
        if self._closed:
            raise NemesisError("this ProxyNetwork was closed; make a new one")
        if self.proxy is None:
            self.proxy = ProxyClient.start(link_host=self.proxy_host, seed=self.seed, stderr=self.proxy_stderr)
        return self

    def __enter__(self) -> ProxyNetwork:
        return self.open()

    def close(self) -> None:
        """Stop the proxy process (every link closes with it). Idempotent."""
        self._closed = True
        proxy, self.proxy = self.proxy, None
        if proxy is not None:
            proxy.stop()

    # -- addresses ----------------------------------------------------------------------

    def listen_address(self, node_id: NodeId) -> tuple[str, int]:
        self._node(node_id)
        return self._listen[node_id]

    def source_listen_address(self, node_id: NodeId, src: MemberId) -> tuple[str, int]:
        """The address node ``node_id`` must listen on for what member
        ``src`` sends it, alone (the node's role is in
        ``per_source_listener_roles``).

        Raises ``UnknownMemberError``, or ``KeyError`` when the node has no
        port of its own for that member."""
        self._node(node_id)
        self.member(src)
        return self._source_listen[(src, node_id)]

    def address_for(self, src: MemberId, dst: NodeId) -> tuple[str, int]:
        self.member(src)
        self._node(dst)
        if src == dst:
            return self._listen[dst]
        return (self.proxy_host, self._links[(src, dst)][1])

    def link_name(self, src: MemberId, dst: NodeId) -> str:
        """The proxy's name for the link ``src`` uses to reach ``dst``.

        Raises ``KeyError`` when there is no such link."""
        return self._links[(src, dst)][0]

    def links(self) -> dict[tuple[MemberId, MemberId], str]:
        """Every (src, dst) link and its proxy name."""
        return {pair: name for pair, (name, _) in self._links.items()}

    def link_modes(self) -> dict[tuple[MemberId, MemberId], str]:
        """(src, dst) → the mode the proxy reports for that link now.

        Raises ``ProxyError`` when the proxy does not answer."""
        modes = self._require_proxy().link_modes()
        return {pair: modes[name] for pair, (name, _) in self._links.items()}

    def stats(self) -> dict[tuple[MemberId, MemberId], dict[str, Any]]:
        """(src, dst) → the proxy's counters for that link."""
        stats = self._require_proxy().stats()
        return {pair: stats[name] for pair, (name, _) in self._links.items()}

    # -- backend hooks ---------------------------------------------------------------------

    def _require_proxy(self) -> ProxyClient:
        if self.proxy is None:
            raise NemesisError("the proxy is not running: use ProxyNetwork as a context manager (or call open())")
        return self.proxy

    def _register_member(self, member: Member) -> None:
        proxy = self._require_proxy()
        if member.is_node:
            self._listen[member.member_id] = (self.node_host, self._free_node_port())  # type: ignore[index]
        new_pairs: list[tuple[Member, Member]] = []
        for other in self._members.values():
            if member.is_node:
                new_pairs.append((other, member))  # every node and client reaches a node
            if other.is_node:
                new_pairs.append((member, other))
        for src, dst in new_pairs:
            name = f"{self.prefix}{src.label}->{dst.label}"
            host, port = self._listen[dst.member_id]  # type: ignore[index]
            if dst.role in self.per_source_listener_roles:
                host, port = self._source_listen[(src.member_id, dst.member_id)] = (self.node_host, self._free_node_port())  # type: ignore[index]
            link_port = proxy.add_link(name, 0, host, port)
            self._links[(src.member_id, dst.member_id)] = (name, link_port)
            self._applied[name] = _link_state(None, None, None, None)
        # A member added while faults are active joins the network healed.

    def _apply(
        self,
        cut: dict[tuple[MemberId, MemberId], CutKind],
        delays: dict[tuple[MemberId, MemberId], tuple[float, float]],
    ) -> None:
        changes: dict[str, dict[str, Any]] = {}
        for (src, dst), (name, _) in self._links.items():
            desired = _link_state(cut.get((src, dst)), cut.get((dst, src)), delays.get((src, dst)), delays.get((dst, src)))
            if self._applied.get(name) != desired:
                changes[name] = desired
        if changes:
            self._require_proxy().apply(changes)
            self._applied.update(changes)

    def _free_node_port(self) -> int:
        taken = {port for _, port in self._listen.values()} | {port for _, port in self._source_listen.values()}
        for _ in range(64):
            with socket.socket() as probe:
                probe.bind((self.node_host, 0))
                port = probe.getsockname()[1]
            if port not in taken:
                return port
        raise NemesisError(f"no free port on {self.node_host}")


def _link_state(
    a_to_b_cut: CutKind | None,
    b_to_a_cut: CutKind | None,
    a_to_b_delay: tuple[float, float] | None,
    b_to_a_delay: tuple[float, float] | None,
) -> dict[str, Any]:
    """The proxy link settings for a link whose a→b direction carries
    ``src → dst`` and whose b→a carries ``dst → src``."""
    # A reset kills both directions, so refuse only when both are cut.
    refuse = a_to_b_cut is not None and b_to_a_cut is not None and "refuse" in (a_to_b_cut, b_to_a_cut)
    mode = link_mode_for(a_to_b_cut is not None, b_to_a_cut is not None, refuse=refuse)
    return {
        "mode": mode.value,
        "delay_a_to_b_ms": list(a_to_b_delay or (0.0, 0.0)),
        "delay_b_to_a_ms": list(b_to_a_delay or (0.0, 0.0)),
    }
