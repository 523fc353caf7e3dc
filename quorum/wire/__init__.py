"""The wire protocol: length-prefixed msgpack frames carrying the quorum's
messages, client requests and connection frames, decoded strictly.

See docs/protocol.md for the format. Typical use by a runtime::

    decoder = FrameDecoder(frame_bytes_max=limits.frame_bytes_max)
    decoder.feed(data)
    while (payload := decoder.next_frame()) is not None:   # FrameTooLargeError: close
        try:
            decoded = decode_message(payload, expected_cluster_id=cluster_id, limits=limits)
        except RemoteProtocolError as error:
            log.warning("bad frame from %s: %s", peer, error)
            if error.correlation_id is not None and error.message_type != "ErrorFrame":
                send(encode_message(error.to_error_frame(), correlation_id=error.correlation_id, cluster_id=cluster_id))
            if not error.recoverable:
                close()
            continue
        handle(decoded.message, decoded.correlation_id)
"""

from ._client_messages import (
    CLIENT_MESSAGE_TYPES,
    AddVoterRequest,
    ApplicationRequest,
    ApplicationResponse,
    READ_MODES,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ProposeRequest,
    ProposeResponse,
    ReadRequest,
    ReadResponse,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    VoterChangeResponse,
)
from ._codec import Decoded, RecordSegments, decode_message, encode_message
from ._connection_messages import HELLO_ROLES, ErrorFrame, Hello
from ._errors import (
    ClusterIdMismatchError,
    FrameTooLargeError,
    InvalidMessageError,
    LocalProtocolError,
    MalformedFrameError,
    ProtocolError,
    RemoteProtocolError,
    TruncatedFrameError,
    UnknownMessageTypeError,
    UnsupportedVersionError,
)
from ._checks import CLUSTER_ID_CHARS_MAX, EPOCH_MAX, INT64_MAX, NODE_ID_MAX, check_cluster_id, check_node_id
from ._frames import FIRST_BYTES_SHOWN, FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FrameDecoder, encode_frame, peek_type_code
from ._schema import DEFAULT_LIMITS, MESSAGE_TYPE_CODES, NODE_LIMITS, PROTOCOL_VERSION, WireLimits

__all__ = [
    "AddVoterRequest",
    "ApplicationRequest",
    "ApplicationResponse",
    "CLIENT_MESSAGE_TYPES",
    "CLUSTER_ID_CHARS_MAX",
    "DEFAULT_LIMITS",
    "EPOCH_MAX",
    "INT64_MAX",
    "NODE_ID_MAX",
    "NODE_LIMITS",
    "FIRST_BYTES_SHOWN",
    "FRAME_BYTES_MAX",
    "FRAME_HEADER_BYTES",
    "HELLO_ROLES",
    "MESSAGE_TYPE_CODES",
    "PROTOCOL_VERSION",
    "READ_MODES",
    "ClusterIdMismatchError",
    "Decoded",
    "DescribeQuorumRequest",
    "DescribeQuorumResponse",
    "ErrorFrame",
    "FrameDecoder",
    "FrameTooLargeError",
    "Hello",
    "InvalidMessageError",
    "LocalProtocolError",
    "MalformedFrameError",
    "ProposeRequest",
    "ProposeResponse",
    "ProtocolError",
    "ReadRequest",
    "ReadResponse",
    "RecordSegments",
    "RemoteProtocolError",
    "RemoveVoterRequest",
    "TruncatedFrameError",
    "UnknownMessageTypeError",
    "UnsupportedVersionError",
    "UpgradeVotersRequest",
    "VoterChangeResponse",
    "WireLimits",
    "check_cluster_id",
    "check_node_id",
    "decode_message",
    "encode_frame",
    "encode_message",
    "peek_type_code",
]
