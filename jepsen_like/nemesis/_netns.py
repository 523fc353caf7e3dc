"""The ``--net netns`` backend: real network namespaces, veth pairs, a
bridge, and firewall DROP/REJECT rules. Needs root.

Layout for a run with prefix ``pk-<run>-`` (nothing is created in the
host's own namespace, so the host's interfaces, routes and rules are never
touched):

* ``pk-<run>-br``: a namespace holding only the bridge ``pk-<run>-br``;
* ``pk-<run>-m<k>``: one namespace per member (node *or* client), k its
  order of addition, with a veth ``pk-<run>-e<k>`` whose peer
  ``pk-<run>-b<k>`` sits in the bridge namespace, enslaved to the bridge;
  address ``<subnet>.<10 + k>/24`` (default subnet 10.213.0, which exists
  only inside these namespaces, so concurrent runs do not clash);
* in every member namespace, one firewall table/chain whose rules drop (or
  reject) what the cut pairs say that member must not receive.

Veths are created directly inside their namespaces, so a killed run can
only leave namespaces behind (and processes in them); ``cleanup_leftovers``
kills those processes and deletes the namespaces, which destroys the veths,
the bridge and the rules with them.

Clients reach nodes from their own namespaces: a client process is started
with ``run_in(client, argv)``; a trio task of the harness itself opens its
sockets inside the client's namespace under ``client_sockets(client)``
(a custom trio socket factory that creates each socket after ``setns(2)``
into the namespace on the creating thread, then switches straight back).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket as stdlib_socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Literal

import trio

from ._errors import NetnsError, NetnsUnavailableError, UnsupportedFaultError
from ._topology import CutKind, Member, MemberId, NetworkTopology, NodeId

NETNS_DIR = "/run/netns"
DEFAULT_SUBNET_PREFIX = "10.213.0"
DEFAULT_NODE_PORT = 9092
FIRST_HOST_OCTET = 10
MEMBERS_MAX = 240  # host octets 10..249 of the /24
COMMAND_TIMEOUT_S = 15.0
PROCESS_EXIT_TIMEOUT_S = 5.0
NFT_TABLE = "pk_nemesis"
IPTABLES_CHAIN = "PK-NEMESIS"
_CLONE_NEWNET = 0x40000000
_RUN_PREFIX_PATTERN = re.compile(r"^pk-[a-z0-9]{1,6}-$")

Firewall = Literal["nft", "iptables"]


# -- commands ---------------------------------------------------------------------------------


def _run(argv: Sequence[str], *, input_text: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command; raises ``NetnsError`` (with its stderr) when it fails
    and ``check`` is set."""
    try:
        result = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetnsError(f"`{' '.join(argv)}` could not run: {error}") from error
    if check and result.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _pick_firewall(preference: str) -> Firewall | None:
    if preference not in ("auto", "nft", "iptables"):
        raise ValueError(f"firewall must be auto, nft or iptables, got {preference!r}")
    if preference in ("auto", "nft") and shutil.which("nft"):
        return "nft"
    if preference in ("auto", "iptables") and shutil.which("iptables") and shutil.which("iptables-restore"):
        return "iptables"
    return None


def list_namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list``)."""
    result = _run(["ip", "netns", "list"], check=False)
    return sorted(line.split()[0] for line in result.stdout.splitlines() if line.strip())


def _root_links() -> list[str]:
    result = _run(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in result.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def leftovers(prefix: str) -> dict[str, list[str]]:
    """What exists now with ``prefix``: ``{"namespaces": [...], "links":
    [...]}`` (links in the host's namespace, which a run never creates)."""
    return {
        "namespaces": [name for name in list_namespaces() if name.startswith(prefix)],
        "links": [name for name in _root_links() if name.startswith(prefix)],
    }


def cleanup_leftovers(prefix: str) -> list[str]:
    """Remove everything a run with ``prefix`` (``pk-<run>-``) created, even
    if that run was killed: SIGKILL every process still inside its
    namespaces, delete the namespaces (their veths, bridge and rules go
    with them), delete any host link with the prefix. Idempotent; returns
    what it removed.

    Raises ``ValueError`` unless ``prefix`` is one run's prefix (so one run
    can never remove another's), ``NetnsError`` when something is left."""
    if not _RUN_PREFIX_PATTERN.match(prefix):
        raise ValueError(f"prefix must look like pk-<run id>-, got {prefix!r}")
    found = leftovers(prefix)
    removed: list[str] = []
    for namespace in found["namespaces"]:
        _kill_processes_in(namespace)
    for namespace in found["namespaces"]:
        result = _run(["ip", "netns", "delete", namespace], check=False)
        if result.returncode == 0 or not os.path.exists(os.path.join(NETNS_DIR, namespace)):
            removed.append(namespace)
    for link in found["links"]:
        if _run(["ip", "link", "delete", link], check=False).returncode == 0:
            removed.append(link)
    left = leftovers(prefix)
    if left["namespaces"] or left["links"]:
        raise NetnsError(f"cleanup of {prefix} left {left}")
    return removed


def _kill_processes_in(namespace: str) -> None:
    result = _run(["ip", "netns", "pids", namespace], check=False)
    pids = {int(word) for word in result.stdout.split() if word.isdigit()} - {os.getpid()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + PROCESS_EXIT_TIMEOUT_S
    # A killed process leaves the list once it is a zombie (it has no
    # namespace then), so this neither needs nor does any reaping: the
    # process's parent keeps its exit status.
    while pids and time.monotonic() < deadline:
        still = _run(["ip", "netns", "pids", namespace], check=False).stdout.split()
        pids &= {int(word) for word in still if word.isdigit()}
        if pids:
            time.sleep(0.02)


# -- sockets inside a namespace --------------------------------------------------------------

_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextlib.contextmanager
def _thread_in_namespace(namespace: str) -> Iterator[None]:
    """Move this thread into ``namespace`` for the block (only this thread:
    setns(2) is per thread). Sockets created in the block stay in that
    namespace for life."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            target = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY)
        except OSError as error:
            raise NetnsError(f"no network namespace {namespace!r}: {error}") from error
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)  # if this failed the thread would be stranded: let it raise
    finally:
        os.close(own)


def open_socket_in_namespace(
    namespace: str,
    family: int = stdlib_socket.AF_INET,
    type: int = stdlib_socket.SOCK_STREAM,  # noqa: A002 - the socket module's name
    proto: int = 0,
) -> stdlib_socket.socket:
    """A new socket that lives in ``namespace``.

    Raises ``NetnsError`` when the namespace does not exist, ``OSError``
    when setns(2) is refused (not root)."""
    with _thread_in_namespace(namespace):
        return stdlib_socket.socket(family, type, proto)


_SOCKET_NAMESPACE: contextvars.ContextVar[str | None] = contextvars.ContextVar("pykraft_nemesis_namespace", default=None)
_FACTORY_INSTALLED: trio.lowlevel.RunVar[bool] = trio.lowlevel.RunVar("pykraft_nemesis_factory", default=False)


class _NamespaceSocketFactory(trio.abc.SocketFactory):
    """Creates each trio socket in the namespace the creating task is bound
    to (``_SOCKET_NAMESPACE``), or as usual when it is bound to none."""

    def __init__(self, previous: trio.abc.SocketFactory | None) -> None:
        self._previous = previous

    def socket(
        self,
        family: stdlib_socket.AddressFamily | int = stdlib_socket.AF_INET,
        type: stdlib_socket.SocketKind | int = stdlib_socket.SOCK_STREAM,  # noqa: A002
        proto: int = 0,
    ) -> trio.socket.SocketType:
        namespace = _SOCKET_NAMESPACE.get()
        if namespace is None:
            if self._previous is not None:
                return self._previous.socket(family, type, proto)
            return trio.socket.from_stdlib_socket(stdlib_socket.socket(family, type, proto))
        return trio.socket.from_stdlib_socket(open_socket_in_namespace(namespace, family, type, proto))


@contextlib.contextmanager
def trio_sockets_in_namespace(namespace: str) -> Iterator[None]:
    """Within a trio run: every trio socket the current task (and any task
    it starts inside the block) creates lives in ``namespace``.

    Raises ``RuntimeError`` outside ``trio.run``."""
    trio.lowlevel.current_trio_token()  # RuntimeError outside trio
    if not _FACTORY_INSTALLED.get():
        previous = trio.socket.set_custom_socket_factory(None)
        trio.socket.set_custom_socket_factory(_NamespaceSocketFactory(previous))
        _FACTORY_INSTALLED.set(True)
    token = _SOCKET_NAMESPACE.set(namespace)
    try:
        yield
    finally:
        _SOCKET_NAMESPACE.reset(token)


# -- the backend ------------------------------------------------------------------------------


_AVAILABILITY: tuple[bool, str] | None = None


class NetnsNetwork(NetworkTopology):
    """Each member in its own network namespace on a private bridge;
    partitions are firewall rules inside the namespaces. Needs root.

    ::

        ok, reason = NetnsNetwork.available()
        with NetnsNetwork() as net:
            net.add_node(1, "controller", zone="az1")
            argv = net.run_in(1, ["kraft-quorum", "node", "--plaintext", "--node-id", "1", "--voters", net.voters_arg(1),
                                  "--listen", "%s:%d" % net.listen_address(1)])
            net.isolate(1)
    """

    backend_name = "netns"

    def __init__(
        self,
        run_id: str | None = None,
        *,
        subnet_prefix: str = DEFAULT_SUBNET_PREFIX,
        node_port: int = DEFAULT_NODE_PORT,
        firewall: str = "auto",
    ) -> None:
        """Nothing is created until ``open()`` (or ``with``).

        ``subnet_prefix`` is the first three octets of the private /24
        used inside the namespaces; ``node_port`` is the port every node
        listens on (each has its own address); ``firewall`` is ``auto``
        (nft if installed, else iptables), ``nft`` or ``iptables``.

        Raises ``ValueError`` for a malformed run id or subnet."""
        super().__init__(run_id)
        octets = subnet_prefix.split(".")
        if len(octets) != 3 or not all(o.isdigit() and 0 <= int(o) <= 255 for o in octets):
            raise ValueError(f"subnet_prefix must be three octets like 10.213.0, got {subnet_prefix!r}")
        self.subnet_prefix = subnet_prefix
        self.node_port = node_port
        self.firewall_preference = firewall
        self.firewall: Firewall | None = None
        self.bridge_namespace = f"{self.prefix}br"
        self.bridge_name = f"{self.prefix}br"
        self._rules_applied: dict[str, str] = {}
        self._opened = False
        self._closed = False

    # -- availability and lifecycle ---------------------------------------------------------

    @staticmethod
    def available(firewall: str = "auto") -> tuple[bool, str]:
        """``(True, "")`` when this machine can run the backend, else
        ``(False, reason)``: not Linux, not root, ``ip`` or ``nft``/
        ``iptables`` missing, or namespaces not permitted. Creates and
        removes a probe namespace the first time."""
        global _AVAILABILITY
        if _AVAILABILITY is not None and firewall == "auto":
            return _AVAILABILITY
        if not sys.platform.startswith("linux"):
            return False, "network namespaces need Linux"
        if os.geteuid() != 0:
            return False, "the netns backend needs root (it creates namespaces, veths and firewall rules)"
        if shutil.which("ip") is None:
            return False, "iproute2's `ip` is not installed (Debian: apt-get install iproute2)"
        chosen = _pick_firewall(firewall)
        if chosen is None:
            return False, "neither `nft` nor `iptables`/`iptables-restore` is installed (Debian: apt-get install nftables)"
        probe = f"pk-{secrets.token_hex(3)}-probe"
        try:
            result = _run(["ip", "netns", "add", probe], check=False)
            if result.returncode != 0:
                verdict = (False, f"cannot create a network namespace: {result.stderr.strip()}")
            else:
                check = ["nft", "list", "tables"] if chosen == "nft" else ["iptables", "-S"]
                result = _run(["ip", "netns", "exec", probe, *check], check=False)
                if result.returncode != 0:
                    verdict = (False, f"`{check[0]}` does not work inside a namespace: {result.stderr.strip()}")
                else:
                    verdict = (True, "")
        finally:
            _run(["ip", "netns", "delete", probe], check=False)
        if firewall == "auto":
            _AVAILABILITY = verdict
        return verdict

    def open(self) -> NetnsNetwork:
        """Create the bridge namespace. Raises ``NetnsUnavailableError``
        (with the reason) when the machine cannot, ``NetnsError`` when a
        command fails (after removing what was made)."""
        if self._closed:
            raise NetnsError("this NetnsNetwork was closed; make a new one")
        if self._opened:
            return self
        ok, reason = self.available(self.firewall_preference)
        if not ok:
            raise NetnsUnavailableError(reason)
        self.firewall = _pick_firewall(self.firewall_preference)
        atexit.register(self.close)  # a harness that forgets close() still cleans up
        self._opened = True
        try:
            _run(["ip", "netns", "add", self.bridge_namespace])
            _run(["ip", "-n", self.bridge_namespace, "link", "add", self.bridge_name, "type", "bridge"])
            _run(["ip", "-n", self.bridge_namespace, "link", "set", self.bridge_name, "up"])
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> NetnsNetwork:
        return self.open()

    def close(self) -> None:
        """Kill whatever still runs in this run's namespaces and delete
        them all. Idempotent. Raises ``NetnsError`` when something could
        not be removed."""
        if self._closed or not self._opened:
            self._closed = True
            return
        self._closed = True
        atexit.unregister(self.close)
        cleanup_leftovers(self.prefix)

    # -- addresses -------------------------------------------------------------------------

    def namespace_of(self, member_id: MemberId) -> str:
        """The namespace ``member_id`` lives in. Raises ``UnknownMemberError``."""
        return f"{self.prefix}m{self.member(member_id).index}"

    def address_of(self, member_id: MemberId) -> str:
        """``member_id``'s IPv4 address on the bridge. Raises ``UnknownMemberError``."""
        return f"{self.subnet_prefix}.{FIRST_HOST_OCTET + self.member(member_id).index}"

    def listen_address(self, node_id: NodeId) -> tuple[str, int]:
        self._node(node_id)
        return (self.address_of(node_id), self.node_port)

    def address_for(self, src: MemberId, dst: NodeId) -> tuple[str, int]:
        self.member(src)
        return self.listen_address(dst)  # no proxies: everyone dials the node itself

    def run_in(self, member_id: MemberId, argv: Sequence[str]) -> list[str]:
        """``ip netns exec <namespace> argv...``: start a process as
        ``member_id``. (``ip netns exec`` execs the command, so the pid you
        get is the command's.) Raises ``UnknownMemberError``."""
        return ["ip", "netns", "exec", self.namespace_of(member_id), *argv]

    def client_sockets(self, member_id: MemberId) -> contextlib.AbstractContextManager[None]:
        """Under this block, the current trio task and the tasks it starts
        open their sockets inside ``member_id``'s namespace, so an
        in-process client is cut exactly like that member.

        Raises ``UnknownMemberError``; ``RuntimeError`` outside trio."""
        return trio_sockets_in_namespace(self.namespace_of(member_id))

    def open_socket_in(
        self, member_id: MemberId, family: int = stdlib_socket.AF_INET, type: int = stdlib_socket.SOCK_STREAM  # noqa: A002
    ) -> stdlib_socket.socket:
        """A plain socket living in ``member_id``'s namespace (for checks
        and probes outside trio). Raises ``UnknownMemberError``, ``NetnsError``."""
        return open_socket_in_namespace(self.namespace_of(member_id), family, type)

    # -- backend hooks ---------------------------------------------------------------------

    def _register_member(self, member: Member) -> None:
        if not self._opened or self._closed:
            raise NetnsError("the netns network is not open: use NetnsNetwork as a context manager (or call open())")
        if member.index >= MEMBERS_MAX:
            raise NetnsError(f"at most {MEMBERS_MAX} members fit in the /24")
        namespace = f"{self.prefix}m{member.index}"
        inner, outer = f"{self.prefix}e{member.index}", f"{self.prefix}b{member.index}"
        address = f"{self.subnet_prefix}.{FIRST_HOST_OCTET + member.index}/24"
        _run(["ip", "netns", "add", namespace])
        # Created straight inside the two namespaces: no veth ever exists
        # in the host's namespace, not even for a moment.
        _run(["ip", "link", "add", inner, "netns", namespace, "type", "veth",
              "peer", "name", outer, "netns", self.bridge_namespace])  # fmt: skip
        _run(["ip", "-n", self.bridge_namespace, "link", "set", outer, "master", self.bridge_name, "up"])
        _run(["ip", "-n", namespace, "addr", "add", address, "dev", inner])
        _run(["ip", "-n", namespace, "link", "set", inner, "up"])
        _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        if self.firewall == "iptables":
            _run(["ip", "netns", "exec", namespace, "iptables", "-w", "-N", IPTABLES_CHAIN])
            _run(["ip", "netns", "exec", namespace, "iptables", "-w", "-I", "INPUT", "-j", IPTABLES_CHAIN])
        self._write_rules(namespace, [])

    def _check_delay_supported(self) -> None:
        raise UnsupportedFaultError(
            "the netns backend cannot delay: that needs tc netem, whose kernel module (sch_netem) is not "
            "available on this machine; use the proxy backend (the default, --net proxy) for delays"
        )

    def _apply(
        self,
        cut: dict[tuple[MemberId, MemberId], CutKind],
        delays: dict[tuple[MemberId, MemberId], tuple[float, float]],
    ) -> None:
        if delays:
            self._check_delay_supported()
        incoming: dict[MemberId, list[tuple[str, CutKind]]] = {member_id: [] for member_id in self._members}
        for (src, dst), how in cut.items():
            # Filtered where it arrives (INPUT of dst): a DROP in the
            # sender's OUTPUT would fail its send() with EPERM, not silence.
            incoming[dst].append((self.address_of(src), how))
        for member_id, sources in incoming.items():
            self._write_rules(self.namespace_of(member_id), sorted(sources))

    def _write_rules(self, namespace: str, sources: list[tuple[str, CutKind]]) -> None:
        if self.firewall == "nft":
            text = _nft_rules(sources)
            if self._rules_applied.get(namespace) != text:
                _run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input_text=text)
        else:
            text = _iptables_rules(sources)
            if self._rules_applied.get(namespace) != text:
                _run(["ip", "netns", "exec", namespace, "iptables-restore", "-w", "--noflush"], input_text=text)
        self._rules_applied[namespace] = text


def _nft_rules(sources: list[tuple[str, CutKind]]) -> str:
    """One nft transaction that replaces the whole table atomically."""
    lines = []
    for address, how in sources:
        if how == "refuse":
            # Let the peer's own resets in, so that when both sides refuse,
            # each side's RST still reaches the other (ECONNREFUSED, not a hang).
            lines.append(f"ip saddr {address} tcp flags & rst == rst accept")
            lines.append(f"ip saddr {address} meta l4proto tcp reject with tcp reset")
        lines.append(f"ip saddr {address} drop")
    body = "\n".join(f"    {line}" for line in lines)
    return (
        f"table inet {NFT_TABLE}\n"
        f"delete table inet {NFT_TABLE}\n"
        f"table inet {NFT_TABLE} {{\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        f"{body}\n"
        "  }\n"
        "}\n"
    )


def _iptables_rules(sources: list[tuple[str, CutKind]]) -> str:
    """An iptables-restore --noflush input: declaring the chain flushes it,
    so the chain is replaced atomically."""
    lines = ["*filter", f":{IPTABLES_CHAIN} - [0:0]"]
    for address, how in sources:
        if how == "refuse":
            lines.append(f"-A {IPTABLES_CHAIN} -s {address}/32 -p tcp --tcp-flags RST RST -j ACCEPT")
            lines.append(f"-A {IPTABLES_CHAIN} -s {address}/32 -p tcp -j REJECT --reject-with tcp-reset")
        lines.append(f"-A {IPTABLES_CHAIN} -s {address}/32 -j DROP")
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"
