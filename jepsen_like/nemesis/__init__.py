"""The nemesis's network faults: partitions, one-way cuts, refusals and
delays between the nodes and clients of a real-process run.

Two backends share one API (``NetworkTopology``):

* ``ProxyNetwork`` (the default): every node↔node and client↔node link
  goes through a userspace TCP proxy process (``python -m
  jepsen_like.nemesis.proxy``), which can stall, refuse, cut one way and
  delay each directed link;
* ``NetnsNetwork`` (``--net netns``, root only): each member in its own
  network namespace on a private bridge, partitions as nft/iptables rules.

Hostile clients (``HOSTILE_KINDS``, ``run_kind``, ``run_attack``): garbage,
oversize, stalled, pipelined, forged-field and flood traffic at a node's
own port, for the campaign's ``hostile-clients`` scenario and the abuse
benchmark; with ``HostileTarget.tls`` sent by a client holding a certificate
from the cluster's CA (``attacks_of``: it also impersonates voters).

``docs/nemesis.md`` describes both, every fault shape, and the cleanup
guarantees.
"""

from __future__ import annotations

from ._errors import (
    NemesisError,
    NetnsError,
    NetnsUnavailableError,
    ProxyCommandError,
    ProxyError,
    UnknownMemberError,
    UnsupportedFaultError,
)
from ._hostile import ATTACKS, HOSTILE_KINDS, HostileStats, HostileTarget, attacks_of, run_attack, run_kind
from ._netns import NetnsNetwork, cleanup_leftovers, leftovers, open_socket_in_namespace, trio_sockets_in_namespace
from ._proxy import Direction, LinkMode, ProxyServer, link_mode_for, serve_proxy
from ._proxy_client import AsyncProxyClient, ProxyClient
from ._proxy_network import ProxyNetwork
from ._topology import Member, NetFault, NetworkTopology, new_run_id, run_prefix

NETWORK_BACKENDS = ("proxy", "netns")


def open_network(kind: str = "proxy", run_id: str | None = None, **options: object) -> NetworkTopology:
    """The backend for ``--net KIND``, opened (use it in a ``with`` block).

    Raises ``ValueError`` for an unknown kind, ``NetnsUnavailableError``
    when netns is asked for on a machine that cannot do it, ``ProxyError``
    when the proxy does not start."""
    if kind == "proxy":
        return ProxyNetwork(run_id, **options).open()  # type: ignore[arg-type]
    if kind == "netns":
        return NetnsNetwork(run_id, **options).open()  # type: ignore[arg-type]
    raise ValueError(f"--net must be one of {NETWORK_BACKENDS}, got {kind!r}")


__all__ = [
    "ATTACKS",
    "HOSTILE_KINDS",
    "NETWORK_BACKENDS",
    "AsyncProxyClient",
    "Direction",
    "HostileStats",
    "HostileTarget",
    "LinkMode",
    "Member",
    "NemesisError",
    "NetFault",
    "NetnsError",
    "NetnsNetwork",
    "NetnsUnavailableError",
    "NetworkTopology",
    "ProxyClient",
    "ProxyCommandError",
    "ProxyError",
    "ProxyNetwork",
    "ProxyServer",
    "UnknownMemberError",
    "UnsupportedFaultError",
    "attacks_of",
    "cleanup_leftovers",
    "leftovers",
    "link_mode_for",
    "new_run_id",
    "open_network",
    "open_socket_in_namespace",
    "run_attack",
    "run_kind",
    "run_prefix",
    "serve_proxy",
    "trio_sockets_in_namespace",
]
