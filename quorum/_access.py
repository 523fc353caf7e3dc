"""Who may say what: principals, identity binding and the ACL (issue 16).

Sans-IO: the transport authenticates (TLS; ``quorum.runtime.TlsConfig``
turns a verified peer certificate into a ``Principal``) and hands the
principal to these pure functions as data; they decide. The simulator
models authenticated channels and needs none of this.

A principal is the URI in the certificate's subjectAltName
(docs/security.md, "Principals"):

- ``pykraft://node/3`` — quorum node 3 (a voter, or an observer);
- ``pykraft://broker/7`` — broker 7 (an observer of the metadata log);
- ``pykraft://client/NAME`` — a client (tools, applications, the harness).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ._messages import FetchRequest, FetchSnapshotRequest, Message

PRINCIPAL_SCHEME = "pykraft://"
#: A client name: what a CLI or a config file may reasonably hold.
CLIENT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
CLIENT_NAME_LENGTH_MAX = 64


class PrincipalKind(enum.Enum):
    NODE = "node"
    BROKER = "broker"
    CLIENT = "client"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated identity: a node or broker id, or a client name."""

    kind: PrincipalKind
    name: str

    @property
    def uri(self) -> str:
        return f"{PRINCIPAL_SCHEME}{self.kind.value}/{self.name}"

    @property
    def member_id(self) -> int | None:
        """The node or broker id; None for a client."""
        return None if self.kind is PrincipalKind.CLIENT else int(self.name)

    def __str__(self) -> str:
        return self.uri


def parse_principal(uri: str) -> Principal:
    """The principal a SAN URI names.

    Raises ``ValueError`` for anything but ``pykraft://node/ID``,
    ``pykraft://broker/ID`` (ID a decimal int >= 0) or
    ``pykraft://client/NAME`` (letters, digits, ``-_.``, at most 64).
    """
    if not isinstance(uri, str) or not uri.startswith(PRINCIPAL_SCHEME):
        raise ValueError(f"not a pykraft principal: {uri!r}")
    kind_text, _, name = uri[len(PRINCIPAL_SCHEME) :].partition("/")
    try:
        kind = PrincipalKind(kind_text)
    except ValueError:
        raise ValueError(f"unknown principal kind in {uri!r}: expected node, broker or client") from None
    if kind is PrincipalKind.CLIENT:
        if not name or len(name) > CLIENT_NAME_LENGTH_MAX or not set(name) <= CLIENT_NAME_CHARS:
            raise ValueError(f"bad client name in {uri!r}")
    elif not name.isascii() or not name.isdigit() or len(name) > 9:
        raise ValueError(f"bad member id in {uri!r}: expected a decimal int")
    else:
        name = str(int(name))
    return Principal(kind, name)


def principal_from_uris(uris: Iterable[str]) -> Principal:
    """The one pykraft principal among a certificate's SAN URIs (others,
    say a SPIFFE id, are ignored). Raises ``ValueError`` for none, several
    or a malformed one."""
    found = [parse_principal(uri) for uri in uris if isinstance(uri, str) and uri.startswith(PRINCIPAL_SCHEME)]
    if len(found) != 1:
        raise ValueError(f"the certificate names {len(found)} pykraft principals, not one")
    return found[0]


def refuse_quorum_message(principal: Principal, message: Message, voter_ids: Collection[int]) -> str | None:
    """Why ``principal`` may not send ``message`` (a Raft message); None
    when it may.

    Identity binding: a certificate for node 3 speaks only as node 3. A
    node principal may send any Raft message under its own id (the core
    ignores what a non-voter may not do, so whether it is a voter stays the
    core's business); a broker may only fetch the log and snapshots, as
    the observer with its own id, never with a voter's id (a broker cannot
    stand, vote or count toward the high watermark). Clients send no Raft
    messages.
    """
    src = message.src
    if principal.kind is PrincipalKind.NODE:
        if principal.member_id != src:
            return f"{principal} sent a {type(message).__name__} as node {src}"
        return None
    if principal.kind is PrincipalKind.BROKER:
        if type(message) not in (FetchRequest, FetchSnapshotRequest):
            return f"{principal} sent a {type(message).__name__}, which only quorum nodes send"
        if principal.member_id != src:
            return f"{principal} fetched as replica {src}"
        if src in voter_ids:
            return f"{principal} fetched with voter id {src}"
        return None
    return f"{principal} sent a {type(message).__name__}, which only quorum nodes and brokers send"


class Operation(enum.Enum):
    """What an ACL grants. ``ADMIN``: writes that change the cluster
    (raw writes, topics, unregistering brokers, voters); ``READ``:
    describe and metadata reads."""

    ADMIN = "admin"
    READ = "read"


#: Matches every authenticated principal in an ACL line.
ANY_PRINCIPAL = "*"
ACL_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True, slots=True)
class AccessControlList:
    """Which principals may do which operation.

    An operation the ACL does not mention keeps its default: ``READ``
    allowed to every authenticated principal, ``ADMIN`` to none. A line
    ``read ...`` restricts reads to those it names. Node principals may
    always do both (a node forwards and replicates; it is trusted by the
    quorum already).
    """

    grants: tuple[tuple[Operation, frozenset[str]], ...] = ()

    def allows(self, principal: Principal, operation: Operation) -> bool:
        if principal.kind is PrincipalKind.NODE:
            return True
        named = [principals for granted, principals in self.grants if granted is operation]
        if not named:
            return operation is Operation.READ
        uri = principal.uri
        return any(uri in principals or ANY_PRINCIPAL in principals for principals in named)


def parse_acl(text: str, source: str = "the ACL") -> AccessControlList:
    """An ACL from its text: one grant per line, ``OPERATION PRINCIPAL...``
    (``admin pykraft://client/admin``, ``read *``), ``#`` comments.

    Raises ``ValueError`` naming the line for an unknown operation or a
    malformed principal, and for a text over ``ACL_BYTES_MAX``.
    """
    if len(text) > ACL_BYTES_MAX:
        raise ValueError(f"{source} is over {ACL_BYTES_MAX} bytes")
    grants: list[tuple[Operation, frozenset[str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            operation = Operation(words[0])
        except ValueError:
            raise ValueError(f"{source} line {number}: unknown operation {words[0]!r} (admin or read)") from None
        principals: set[str] = set()
        for word in words[1:]:
            if word != ANY_PRINCIPAL:
                try:
                    word = parse_principal(word).uri
                except ValueError as error:
                    raise ValueError(f"{source} line {number}: {error}") from None
            principals.add(word)
        if not principals:
            raise ValueError(f"{source} line {number}: {operation.value} grants to nobody")
        grants.append((operation, frozenset(principals)))
    return AccessControlList(tuple(grants))
