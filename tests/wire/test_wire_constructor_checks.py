"""What lets ``encode_message`` skip the send-side decode of a type
(``MessageSchema.checked_by_constructor``): its constructor refuses
everything its decoders refuse. Drawn here from values well outside the
valid ranges and of the wrong types, so that the property is tested where
it could fail: whatever the constructor accepts, every version's decoder
accepts and rebuilds equal, and the frame ``encode_message`` writes decodes.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum import ErrorCode
from quorum.wire import ProposeResponse, decode_message, encode_message
from quorum.wire._schema import DEFAULT_LIMITS, SCHEMAS

CLUSTER = "constructor-checks"
CHECKED = [schema for schema in SCHEMAS if schema.checked_by_constructor]

# Anything a caller might put in a field: in range, out of range, the wrong
# type, nested wrong types.
anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.binary(max_size=12)
    | st.sampled_from(list(ErrorCode)),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)
ints = st.integers(-3, 3) | st.integers(-(2**64), 2**64) | st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63])
results = st.lists(st.none() | st.binary(max_size=8) | anything, max_size=4).map(tuple) | anything


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return strategy | anything


propose_response_fields = st.fixed_dictionaries(
    {},
    optional={
        "error": _maybe(st.sampled_from(list(ErrorCode)) | ints),
        "offset": _maybe(st.none() | ints),
        "leader_hint": _maybe(st.none() | ints),
        "results": results,
        "leader_epoch": _maybe(st.none() | ints),
        "leader_endpoint": _maybe(st.none() | st.sampled_from(["127.0.0.1:9092", "h:0", "h:65536", ":1", "x" * 300])),
        "version": _maybe(st.sampled_from([0, 1, 2, 3])),
    },
)


def test_only_frozen_classes_that_check_in_their_constructor_are_trusted():
    assert [schema.name for schema in CHECKED] == ["ProposeResponse"]
    for schema in CHECKED:
        params = schema.message_class.__dataclass_params__
        assert params.frozen, schema.name
        assert "__post_init__" in vars(schema.message_class), schema.name


@settings(max_examples=1000, deadline=None)
@given(propose_response_fields)
def test_a_propose_response_the_constructor_accepts_every_decoder_accepts(kwargs):
    try:
        message = ProposeResponse(**kwargs)
    except (ValueError, TypeError):
        return
    [schema] = [schema for schema in CHECKED if schema.message_class is ProposeResponse]
    encode, decode = schema.codec(message.version)
    body = encode(message)
    decode(body, DEFAULT_LIMITS, False)  # raises ValueError if the check would have refused it
    rebuilt = decode(body, DEFAULT_LIMITS, True)
    if message.version == 1:
        # Version 1 carries no leader fields.
        message = dataclasses.replace(message, leader_epoch=None, leader_endpoint=None)
    assert rebuilt == message
    frame = encode_message(message, correlation_id=1, cluster_id=CLUSTER)
    assert decode_message(frame[4:], expected_cluster_id=CLUSTER).message == rebuilt


def test_a_frozen_message_changed_behind_its_constructor_is_still_refused_at_the_peer():
    """What the skip gives up, shown: only ``object.__setattr__`` can put a
    value the constructor never saw into a frozen message; the receiver's
    decoder still refuses it."""
    message = ProposeResponse(offset=1)
    object.__setattr__(message, "offset", -1)
    frame = encode_message(message, correlation_id=1, cluster_id=CLUSTER)
    with pytest.raises(ValueError):
        decode_message(frame[4:], expected_cluster_id=CLUSTER)
