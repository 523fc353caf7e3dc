"""A client for brokers: cluster metadata, topics, partition leaders.

::

    async with MetadataClient(["127.0.0.1:9201", "127.0.0.1:9202"]) as client:
        leader = await client.find_leader("orders", 0)
        print(leader.leader, leader.leader_epoch, leader.image_offset)

- **Bootstrap and discovery**: starts from the given broker addresses and
  learns the Online brokers' listeners from every ``cluster_metadata``
  answer.
- **Retries**: a retriable answer (the broker is not Online, its image is
  behind, a stale broker epoch, no leader yet) or a failed connection moves
  to the next broker, with exponential backoff once every broker has been
  tried; reads are idempotent, so retrying is always safe.
- **A monotonic view** (design.md: "metadata offset never goes backwards
  for one client"): every request carries the highest image offset this
  client has seen as ``min_image_offset``, and an answer from an older image
  is refused and asked elsewhere, even if a broker answered it anyway.
- **KIP-380**: requests carry the epoch the client last saw for the broker
  at that address; a bounced broker refuses them (STALE_BROKER_EPOCH), the
  client forgets the epoch and asks again.
- ``advance_to(offset)``: read your own writes (an offset the controller
  answered at after the write).
- ``admin()`` reaches the controller (``registration.client.AdminClient``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import msgpack
import trio

from quorum import PrincipalKind
from quorum.client import speaks_tls
from quorum.runtime import PeerNotAuthenticatedError, TlsConfig
from quorum.wire import (
    ApplicationRequest,
    ApplicationResponse,
    FIRST_BYTES_SHOWN,
    ErrorFrame,
    FrameDecoder,
    RemoteProtocolError,
    decode_message,
    encode_message,
)
from registration.client import AdminClient

from ._protocol import ErrorCode, MetadataRequest, MetadataResponse, ProtocolError

logger = logging.getLogger("pykraft.broker.client")

_BACKOFF_FIRST_S = 0.02
_BACKOFF_MAX_S = 0.5


class MetadataClientError(Exception):
    """No broker gave a usable answer within the retry timeout, or a broker
    refused the request for good (``error`` says why, when one did)."""

    def __init__(self, message: str, error: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error = error


class UnknownTopicError(MetadataClientError):
    """The topic (or partition) does not exist in an image at least as new
    as anything this client has seen."""


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """Where a partition is led, per the image at ``image_offset``."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    leader_broker_epoch: int
    leader_listeners: tuple[tuple[str, str, int], ...]
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    image_offset: int
    answered_by: int


def _parse_address(entry: str) -> tuple[str, int]:
    address = entry.strip()
    if "@" in address:
        address = address.split("@", 1)[1]
    try:
        host, port = address.rsplit(":", 1)
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError(f"bad broker address {entry!r}: expected HOST:PORT or ID@HOST:PORT") from None


def _is_controller_answer(payload: bytes) -> bool:
    """Is ``payload`` a controller's answer (``[wire_name, [fields]]``),
    where a broker's would be a map?"""
    try:
        data = msgpack.unpackb(payload, raw=False)
    except Exception:  # noqa: BLE001 - msgpack raises many kinds on bad input
        return False
    return isinstance(data, list) and len(data) == 2 and isinstance(data[0], str)


class _Connection:
    """One TCP connection, one request at a time."""

    def __init__(self, stream: trio.abc.Stream, cluster_id: str) -> None:
        self.stream = stream
        self.cluster_id = cluster_id
        self.decoder = FrameDecoder()
        self.correlation_id = 0
        # Nothing came back yet: a broker that closes then may require TLS.
        self.received_any = False
        # Until a frame decodes: what names a server of another protocol.
        self.decoded_any = False
        self.first_bytes = b""

    async def request(self, message: Any) -> Any:
        self.correlation_id += 1
        wanted = self.correlation_id
        await self.stream.send_all(encode_message(message, correlation_id=wanted, cluster_id=self.cluster_id))
        while True:
            try:
                while (payload := self.decoder.next_frame()) is not None:
                    decoded = decode_message(payload, expected_cluster_id=self.cluster_id)
                    self.decoded_any = True
                    if decoded.correlation_id == wanted:
                        return decoded.message
            except RemoteProtocolError as error:
                if self.decoded_any:
                    raise
                # Not one frame made sense: no pykraft broker listens there
                # (an HTTP server, SSH), and its first bytes say which.
                raise RemoteProtocolError(
                    f"not a pykraft broker ({error}; its first bytes: {self.first_bytes!r})", recoverable=False
                ) from None
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                raise trio.BrokenResourceError("connection closed by the broker")
            self.received_any = True
            if len(self.first_bytes) < FIRST_BYTES_SHOWN:
                self.first_bytes += data[: FIRST_BYTES_SHOWN - len(self.first_bytes)]
            self.decoder.feed(data)

    async def aclose(self) -> None:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await self.stream.aclose()


class MetadataClient:
    """See the module docstring. Use as an async context manager.

    ``bootstrap``: broker addresses (``HOST:PORT`` or ``ID@HOST:PORT``).
    ``controllers``: the controllers' ``ID@HOST:PORT`` list, for ``admin()``.
    ``tls``: mutual TLS to brokers (which must prove a broker principal)
    and controllers (docs/security.md).
    Raises ``ValueError`` for a malformed address.
    """

    def __init__(
        self,
        bootstrap: list[str],
        *,
        cluster_id: str = "pykraft",
        controllers: list[str] | None = None,
        request_timeout_s: float = 2.0,
        retry_timeout_s: float = 15.0,
        pin_broker_epochs: bool = True,
        tls: TlsConfig | None = None,
    ) -> None:
        self.tls = tls
        if not bootstrap:
            raise ValueError("no bootstrap brokers given")
        self._bootstrap = [_parse_address(entry) for entry in bootstrap]
        self._addresses: list[tuple[str, int]] = list(dict.fromkeys(self._bootstrap))
        self.cluster_id = cluster_id
        self.controllers = list(controllers or [])
        self.request_timeout_s = request_timeout_s
        self.retry_timeout_s = retry_timeout_s
        self.pin_broker_epochs = pin_broker_epochs
        self._index = 0
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        # Brokers a plaintext client already asked whether they speak TLS.
        self._plaintext_addresses_checked: set[tuple[str, int]] = set()
        self.high_image_offset = -1
        self.refused_older_answers = 0
        self.last_address: tuple[str, int] | None = None

    async def __aenter__(self) -> MetadataClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.aclose()

    def advance_to(self, image_offset: int) -> None:
        """Refuse answers from images older than ``image_offset`` from now
        on: read your own writes. After a controller write, the offset of a
        read that reflects it (``AdminClient.describe_cluster().offset``)
        makes every later answer reflect it too. Raises ``ValueError`` for a
        negative offset."""
        if type(image_offset) is not int or image_offset < 0:
            raise ValueError(f"image_offset must be an int >= 0, got {image_offset!r}")
        self.high_image_offset = max(self.high_image_offset, image_offset)

    @property
    def brokers(self) -> list[tuple[str, int]]:
        """The addresses this client will try, in order."""
        return list(self._addresses)

    # ------------------------------------------------------------------
    # Requests
    # ------------------------------------------------------------------

    async def request(self, op: str, **fields: Any) -> MetadataResponse:
        """Send one request to an Online broker, retrying as the module
        docstring says. Returns the first acceptable answer (``error`` NONE,
        or a definite answer such as UNKNOWN_TOPIC_OR_PARTITION). Raises
        ``MetadataClientError`` when none comes within the retry timeout or
        the request is malformed (``ProtocolError`` before sending)."""
        MetadataRequest(op=op, **fields)  # validate before any IO
        deadline = trio.current_time() + self.retry_timeout_s
        backoff_s = _BACKOFF_FIRST_S
        failures_in_round = 0
        last_problem = "no broker tried"
        while trio.current_time() < deadline:
            address = self._addresses[self._index % len(self._addresses)]
            request = MetadataRequest(
                op=op,
                broker_epoch=self._epochs.get(address) if self.pin_broker_epochs else None,
                min_image_offset=self.high_image_offset if self.high_image_offset >= 0 else None,
                **fields,
            )
            answer, problem = await self._attempt(address, request, deadline)
            if answer is not None and problem is None:
                self.last_address = address
                return answer
            last_problem = f"{address[0]}:{address[1]}: {problem}"
            self._index += 1
            failures_in_round += 1
            if failures_in_round >= len(self._addresses):
                failures_in_round = 0
                await trio.sleep(min(backoff_s, max(0.0, deadline - trio.current_time())))
                backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)
        raise MetadataClientError(f"no broker answered {op} within {self.retry_timeout_s} s: {last_problem}")

    async def _attempt(
        self, address: tuple[str, int], request: MetadataRequest, deadline: float
    ) -> tuple[MetadataResponse | None, str | None]:
        """One try at one broker: (answer, None) to accept, (maybe answer,
        problem) to go on. Raises ``MetadataClientError`` for a definite
        refusal."""
        timeout_s = max(0.001, min(self.request_timeout_s, deadline - trio.current_time()))
        raw: Any = None
        connection: _Connection | None = None
        with trio.move_on_after(timeout_s):
            try:
                connection = await self._connect(address)
                raw = await connection.request(ApplicationRequest(payload=request.to_payload()))
            except (
                OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, PeerNotAuthenticatedError,
                ValueError,
            ) as error:  # fmt: skip
                await self._drop(address)
                closed_unanswered = connection is not None and not connection.received_any
                if self.tls is None and closed_unanswered and isinstance(error, (trio.BrokenResourceError, OSError)):
                    await self._refuse_if_tls_required(address, deadline)
                return None, f"{type(error).__name__}: {error}"
        if raw is None:
            await self._drop(address)  # its answer may still come: do not read it as the next one's
            return None, f"no answer within {timeout_s:.3f} s"
        if isinstance(raw, ErrorFrame):
            raise MetadataClientError(f"the broker refused the frame: {raw.code.name} {raw.message}")
        if not isinstance(raw, ApplicationResponse) or raw.error:
            return None, f"not a broker answer: {type(raw).__name__} {getattr(raw, 'error', '')}"
        try:
            answer = MetadataResponse.from_payload(raw.payload)
        except ProtocolError as error:
            if _is_controller_answer(raw.payload):
                # A controller answers with [wire_name, [fields]]: the
                # address is a controller's, not a broker's client port.
                return None, "a controller, not a broker: give brokers' client addresses"
            return None, f"unreadable answer: {error}"
        if answer.error is ErrorCode.STALE_BROKER_EPOCH:
            self._epochs.pop(address, None)  # it bounced: learn the new epoch next time
            return answer, f"{answer.message} (bounced)"
        if answer.error is ErrorCode.INVALID_REQUEST:
            raise MetadataClientError(f"the broker refused the request: {answer.message}", answer.error)
        if answer.broker_epoch >= 0:
            self._epochs[address] = answer.broker_epoch
        if answer.retriable:
            return answer, f"{answer.error.name}: {answer.message}"
        if answer.image_offset < self.high_image_offset:
            # A monotonic view: never go back to an older image.
            self.refused_older_answers += 1
            return answer, f"image at {answer.image_offset}, older than {self.high_image_offset} already seen"
        self.high_image_offset = max(self.high_image_offset, answer.image_offset)
        if request.op == "cluster_metadata" and answer.error is ErrorCode.NONE:
            self._learn_brokers(answer)
        return answer, None

    async def _connect(self, address: tuple[str, int]) -> _Connection:
        connection = self._connections.get(address)
        if connection is None:
            stream: trio.abc.Stream
            if self.tls is None:
                stream = await trio.open_tcp_stream(*address)
            else:
                stream, principal = await self.tls.connect(*address)
                if principal.kind is not PrincipalKind.BROKER:
                    await trio.aclose_forcefully(stream)
                    raise PeerNotAuthenticatedError(f"{address[0]}:{address[1]} is {principal}, not a broker")
            connection = _Connection(stream, self.cluster_id)
            self._connections[address] = connection
        return connection

    async def _refuse_if_tls_required(self, address: tuple[str, int], deadline: float) -> None:
        """Raise ``MetadataClientError`` when the broker at ``address``
        speaks TLS (this client has none); asked once per address."""
        if address in self._plaintext_addresses_checked:
            return
        self._plaintext_addresses_checked.add(address)
        if await speaks_tls(*address, timeout_s=max(0.0, deadline - trio.current_time())):
            raise MetadataClientError(
                f"{address[0]}:{address[1]} requires TLS and this client has none: give it a TlsConfig "
                "(on the command line --tls-ca, --tls-cert and --tls-key)"
            )

    async def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            await connection.aclose()

    def _learn_brokers(self, answer: MetadataResponse) -> None:
        learned: list[tuple[str, int]] = []
        for broker in answer.body.get("brokers", ()):
            for listener in broker.get("listeners", ()):
                if isinstance(listener, (list, tuple)) and len(listener) == 3:
                    learned.append((str(listener[1]), int(listener[2])))
        # Online brokers first, then the bootstrap list as a fallback.
        self._addresses = list(dict.fromkeys(learned + self._bootstrap))
        self._index = 0

    # ------------------------------------------------------------------
    # Conveniences
    # ------------------------------------------------------------------

    async def cluster_metadata(self) -> MetadataResponse:
        """Online brokers, controller id, topic and partition counts; also
        refreshes the brokers this client tries."""
        return self._expect_ok(await self.request("cluster_metadata"))

    async def list_topics(self) -> list[str]:
        """Every topic's name, in order, asked for a page at a time (like
        every answer here, a later page comes from an image no older than
        the one before it, whichever broker answers it)."""
        names: list[str] = []
        after: str | None = None
        while True:
            fields: dict[str, Any] = {} if after is None else {"after": after}
            answer = self._expect_ok(await self.request("list_topics", **fields))
            page = answer.body.get("topics")
            if not isinstance(page, list) or not all(isinstance(name, str) for name in page):
                raise MetadataClientError(f"the broker answered list_topics with no list of names: {answer.body!r:.80}")
            names.extend(page)
            if not answer.body.get("more") or not page:
                return names
            after = page[-1]

    async def describe_topic(self, name: str) -> dict[str, Any]:
        """Raises ``UnknownTopicError`` for a topic the image does not hold."""
        return dict((self._expect_ok(await self.request("describe_topic", topic=name))).body["topic"])

    async def find_leader(self, topic: str, partition: int) -> PartitionLeader:
        """Raises ``UnknownTopicError``, or ``MetadataClientError`` when the
        partition has no leader within the retry timeout."""
        answer = self._expect_ok(await self.request("find_leader", topic=topic, partition=partition))
        body = answer.body
        return PartitionLeader(
            topic=topic,
            partition=partition,
            leader=body["leader"],
            leader_epoch=body["leader_epoch"],
            leader_broker_epoch=body["leader_broker_epoch"],
            leader_listeners=tuple(tuple(listener) for listener in body["leader_listeners"]),
            replicas=tuple(body["replicas"]),
            isr=tuple(body["isr"]),
            image_offset=answer.image_offset,
            answered_by=answer.broker_id,
        )

    async def find_online_broker(self) -> tuple[int, tuple[str, int]]:
        """(broker id, address) of a broker that answers as Online."""
        answer = await self.cluster_metadata()
        assert self.last_address is not None
        return answer.broker_id, self.last_address

    def admin(self, *, timeout_s: float = 10.0) -> AdminClient:
        """An ``AdminClient`` for the controllers given as ``controllers``.
        Raises ``ValueError`` when none were."""
        if not self.controllers:
            raise ValueError("no controllers given: pass controllers=['ID@HOST:PORT', ...]")
        return AdminClient(self.controllers, cluster_id=self.cluster_id, timeout_s=timeout_s, tls=self.tls)

    @staticmethod
    def _expect_ok(answer: MetadataResponse) -> MetadataResponse:
        if answer.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(answer.message, answer.error)
        if answer.error is not ErrorCode.NONE:
            raise MetadataClientError(f"{answer.error.name}: {answer.message}", answer.error)
        return answer
