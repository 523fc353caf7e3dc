"""An admin client for the controller: topics, brokers, cluster.

::

    async with AdminClient(["1@127.0.0.1:9091"]) as admin:
        await admin.create_topic("orders", partitions=6, replication_factor=3)
        description = await admin.describe_topics(["orders"])
"""

from __future__ import annotations

from typing import Any

import msgpack

from quorum import QuorumError
from quorum.client import QuorumClient
from quorum.runtime import TlsConfig

from ._requests import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeControllersRequest,
    DescribeControllersResponse,
    DescribeTopicsRequest,
    DescribeTopicsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    NewTopic,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    RegisterControllerRequest,
    RegisterControllerResponse,
    TopicListing,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from ._requests import decode_message, encode_message


def _is_broker_answer(payload: bytes) -> bool:
    """Is ``payload`` a broker's metadata answer (a msgpack map with an
    ``error``), where a controller's would be ``[wire_name, [fields]]``?"""
    try:
        data = msgpack.unpackb(payload, raw=False)
    except Exception:  # noqa: BLE001 - msgpack raises many kinds on bad input
        return False
    return isinstance(data, dict) and "error" in data


class AdminClientError(QuorumError):
    """The controller answered with something other than the expected
    response (or the address is a broker's, not a controller's). A
    ``QuorumError``, so that the command lines report it as one sentence,
    not as a bug."""


class AdminClient:
    """Requests to the active controller over the quorum's wire protocol;
    NOT_LEADER answers are followed to the leader. With ``tls`` every
    connection is mutual TLS (docs/security.md). Use as an async context
    manager."""

    def __init__(
        self, bootstrap: list[str], *, cluster_id: str = "pykraft", timeout_s: float = 10.0, tls: TlsConfig | None = None
    ) -> None:
        self._client = QuorumClient(bootstrap, cluster_id=cluster_id, retry_timeout_s=timeout_s, tls=tls)
        self.cluster_id = cluster_id

    async def __aenter__(self) -> AdminClient:
        await self._client.__aenter__()
        return self

    @property
    def quorum_client(self) -> QuorumClient:
        """The underlying quorum client: who answered last
        (``last_answered_by``), retry settings."""
        return self._client

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._client.__aexit__(*exc_info)

    async def request(self, request: Any, expected: type, *, idempotent: bool) -> Any:
        """Send one controller request; returns its response. Raises
        ``AdminClientError`` for an unexpected answer, and what
        ``QuorumClient.application_request`` raises."""
        payload = await self._client.application_request(encode_message(request), idempotent=idempotent)
        try:
            response = decode_message(payload)
        except ValueError as error:
            if _is_broker_answer(payload):
                # A broker answers every application request with its
                # metadata map: --bootstrap names a broker's client port.
                raise AdminClientError(
                    f"{self._client.last_answered_by} is a broker, not a controller: it answered as a broker "
                    "does; give the controllers' addresses (the quorum voters' ID@HOST:PORT)"
                ) from error
            raise AdminClientError(f"the controller answered something unreadable: {error}") from error
        if not isinstance(response, expected):
            raise AdminClientError(f"expected {expected.__name__}, got {type(response).__name__}: {response}")
        return response

    async def create_topic(
        self, name: str, *, partitions: int, replication_factor: int, unclean_leader_election: bool = False
    ) -> CreateTopicsResponse:
        topic = NewTopic(
            name=name,
            partitions=partitions,
            replication_factor=replication_factor,
            unclean_leader_election=unclean_leader_election,
        )
        return await self.request(CreateTopicsRequest(topics=(topic,)), CreateTopicsResponse, idempotent=False)

    async def delete_topics(self, names: list[str]) -> DeleteTopicsResponse:
        return await self.request(DeleteTopicsRequest(names=tuple(names)), DeleteTopicsResponse, idempotent=False)

    async def describe_topics(self, names: list[str] | None = None, *, linearizable: bool = False) -> DescribeTopicsResponse:
        request = DescribeTopicsRequest(names=tuple(names) if names is not None else None, linearizable=linearizable)
        return await self.request(request, DescribeTopicsResponse, idempotent=True)

    async def list_topics(self, *, linearizable: bool = False) -> list[TopicListing]:
        """Every topic's name, id and partition count, in name order, page
        by page (``LIST_TOPICS_PAGE_MAX`` a request; each page is read on
        its own, so topics created or deleted meanwhile may or may not
        show). Raises ``AdminClientError`` when the controller refuses."""
        listings: list[TopicListing] = []
        after: str | None = None
        while True:
            request = ListTopicsRequest(after=after, linearizable=linearizable)
            response = await self.request(request, ListTopicsResponse, idempotent=True)
            if response.error:
                raise AdminClientError(f"the controller refused to list topics: {response.error.name} {response.message}")
            listings.extend(response.topics)
            if not response.more or not response.topics:
                return listings
            after = response.topics[-1].name

    async def describe_cluster(self, *, linearizable: bool = False) -> DescribeClusterResponse:
        return await self.request(DescribeClusterRequest(linearizable=linearizable), DescribeClusterResponse, idempotent=True)

    async def register_broker(self, request: RegisterBrokerRequest) -> RegisterBrokerResponse:
        return await self.request(request, RegisterBrokerResponse, idempotent=False)

    async def register_controller(self, request: RegisterControllerRequest) -> RegisterControllerResponse:
        """KIP-919: register a controller (the same incarnation again is a
        harmless retry)."""
        return await self.request(request, RegisterControllerResponse, idempotent=True)

    async def describe_controllers(self, *, linearizable: bool = False) -> DescribeControllersResponse:
        """The registered controllers (KIP-919), from the active controller."""
        return await self.request(
            DescribeControllersRequest(linearizable=linearizable), DescribeControllersResponse, idempotent=True
        )

    async def unregister_broker(self, broker_id: int) -> UnregisterBrokerResponse:
        return await self.request(UnregisterBrokerRequest(broker_id=broker_id), UnregisterBrokerResponse, idempotent=False)
