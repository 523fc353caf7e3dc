"""The generated sections of docs/protocol.md, built from the code's schemas.

    .venv/bin/python -m tests.docs.protocol_reference           # print them
    .venv/bin/python -m tests.docs.protocol_reference --write   # rewrite docs/protocol.md

Each section sits between ``<!-- BEGIN GENERATED: python -m
tests.docs.protocol_reference NAME -->`` and ``<!-- END GENERATED -->``;
tests/docs/test_protocol_doc.py fails when the page and the code disagree.
What a client does on each error code is written here by hand
(``CLIENT_ACTION``): a code added to any ``ErrorCode`` without an entry makes
the generator, and so the test, fail.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import broker_agent._protocol as broker_protocol  # noqa: E402
import quorum  # noqa: E402
import registration  # noqa: E402
from registration import _records, _requests  # noqa: E402
from quorum.wire._schema import SCHEMAS  # noqa: E402

PROTOCOL_MD = ROOT / "docs" / "protocol.md"
MODULE = "tests.docs.protocol_reference"
END_MARKER = "<!-- END GENERATED -->"

# Who answers with which code, and what the receiver of the code does.
CLIENT_ACTION: dict[str, str] = {
    "UNKNOWN_SERVER_ERROR": "the node handled the request but could not send its answer (an application's answer over the 16 MiB frame limit): its outcome is unknown, as after a timeout (`QuorumClient` raises `AnswerNotSentError`, an `IndeterminateError`); the message says why. The same request gets the same answer: the application must answer in smaller pieces",
    "NONE": "success",
    "UNKNOWN_TOPIC_OR_PARTITION": "definite: the topic or partition does not exist (in this image); do not retry unless you expect it to be created",
    "LEADER_NOT_AVAILABLE": "the partition has no leader right now (its replicas are fenced): back off and ask again",
    "NOT_LEADER": "retry at `leader_hint` / `leader_id` if given, else at the next node after a short backoff; the request certainly did not happen",
    "BROKER_NOT_AVAILABLE": "the node or broker cannot serve now (starting, shutting down, or a broker not Online; the answer names its state): retry at another one",
    "INVALID_TOPIC_EXCEPTION": "definite: fix the topic name (1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`)",
    "TOPIC_ALREADY_EXISTS": "definite: the name is taken (after a retried create, it may be yours: describe it)",
    "INVALID_PARTITIONS": "definite: fix the partition count",
    "INVALID_REPLICATION_FACTOR": "fix the replication factor, or wait until enough brokers are Online",
    "CLUSTER_AUTHORIZATION_FAILED": "definite: the sender's certificate principal may not do this (a Raft message under another id, a registration for another broker, an operation the ACL does not grant); the connection stays open. Use the right certificate or ask for a grant (docs/security.md)",
    "INVALID_REQUEST": "a bug in the sender (malformed or contradictory request): do not retry, report it",
    "INCONSISTENT_VOTER_SET": "definite: a broker's Fetch (marked `observer`) names a voter's node id, so two processes share one id (KIP-631); it is refused, never counted as the voter's acknowledgement. Give the broker an id no controller has; its registration is refused for the same reason",
    "FENCED_LEADER_EPOCH": "the sender's epoch is older than the receiver's: learn the new leader (the response's `leader_id` and epoch, or DescribeQuorum) and retry there",
    "UNKNOWN_LEADER_EPOCH": "the sender's epoch is newer than the receiver's, which lags: back off and retry",
    "STALE_BROKER_EPOCH": "the broker epoch is not the current one (KIP-380). A broker re-registers and uses its new epoch; a client forgets the epoch it had for that address and asks again",
    "OFFSET_NOT_AVAILABLE": "the broker's image is older than `min_image_offset`: ask another broker, or this one later",
    "SNAPSHOT_NOT_FOUND": "the snapshot being fetched was replaced: fetch again from the log end to learn the current one",
    "POSITION_OUT_OF_RANGE": "restart the snapshot fetch from position 0",
    "DUPLICATE_BROKER_REGISTRATION": "another live process holds this broker id: retry with backoff (it clears once the old incarnation has been silent for one heartbeat interval); if it persists, two processes share an id",
    "BROKER_ID_NOT_REGISTERED": "definite: no broker with that id is registered",
    "INCONSISTENT_CLUSTER_ID": "fatal misconfiguration: the peer belongs to another cluster; stop and fix `cluster_id` (the connection is closed)",
    "DUPLICATE_VOTER": "definite: the node is already a voter (after a retried AddVoter, the first may have done it: describe the quorum); remove it first to replace its disk",
    "VOTER_NOT_FOUND": "definite: no voter has that node id (and directory id): describe the quorum for the current set",
    "VOTER_CHANGE_IN_PROGRESS": "another voter change is not yet committed, or the new leader has not yet committed in its epoch (KIP-853: one change at a time): retry in a moment",
    "VOTERS_STATIC": "definite: the cluster has a static voter set, which AddVoter and RemoveVoter cannot change: upgrade it first (`kraft-quorum upgrade-voters`, UpgradeVotersRequest), then retry",
    "VOTER_REMOVED": "definite, to auto-join only (an AddVoter version 2 marked `auto_join`): an operator removed this disk and has not added it back. The node remembers it and never asks again; an operator may still add the disk (`kraft-quorum add-voter`)",
    "VOTER_NOT_CAUGHT_UP": "the new voter has not fetched from the leader within the fetch timeout (with that directory id), or its log ends below the high watermark: start it as an observer, wait until it catches up, retry",
}

ERROR_ENUMS = (
    ("quorum", quorum.ErrorCode),
    ("controller", registration.ErrorCode),
    ("broker", broker_protocol.ErrorCode),
)


def begin_marker(name: str) -> str:
    return f"<!-- BEGIN GENERATED: python -m {MODULE} {name} -->"


def _type(annotation: str) -> str:
    """A dataclass annotation in the page's words."""
    text = annotation.replace("ErrorCode", "error")
    text = re.sub(r"tuple\[tuple\[str, str, int\], \.\.\.\]", "array of [name, host, port]", text)
    text = re.sub(r"tuple\[tuple\[str, int, int\], \.\.\.\]", "array of [name, min_version, max_version]", text)
    text = re.sub(r"tuple\[(\w+), \.\.\.\]", r"array of \1", text)
    text = text.replace(" | None", "?")
    return text


def _fields(cls: type) -> str:
    names = [f"`{field.name}`: {_type(str(field.type))}" for field in dataclasses.fields(cls)]
    return ", ".join(names) if names else "(none)"


def messages_section() -> str:
    rows = ["| code | message | versions | body, in wire order |", "|---|---|---|---|"]
    for schema in SCHEMAS:
        # A versioned message's ``version`` is the envelope's, not a body field.
        body = [
            field.name
            for field in dataclasses.fields(schema.message_class)
            if not (field.name == "version" and schema.later_versions) and field.name not in schema.connection_fields
        ]
        names = ", ".join(f"`{name}`" for name in body) or "(empty)"
        versions = ", ".join(str(version) for version in schema.versions)
        rows.append(f"| {schema.type_code} | [`{schema.name}`](#{schema.type_code}-{schema.name.lower()}) | {versions} | {names} |")
    return "\n".join(rows)


def controller_section() -> str:
    rows = ["| wire name | message | fields, in wire order |", "|---|---|---|"]
    for cls in _requests.REQUEST_TYPES + _requests.RESPONSE_TYPES:
        rows.append(f"| `{cls.WIRE_NAME}` | `{cls.__name__}` | {_fields(cls)} |")
    rows += ["", "Nested values (arrays of their fields, in this order):", "", "| value | fields |", "|---|---|"]
    nested = (
        _requests.NewTopic,
        _requests.CreateTopicResult,
        _requests.DeleteTopicResult,
        _requests.BrokerDescription,
        _requests.TopicDescription,
        _requests.PartitionDescription,
        _requests.ControllerDescription,
        _requests.TopicListing,
    )
    for cls in nested:
        rows.append(f"| `{cls.__name__}` | {_fields(cls)} |")
    rows += ["", "Heartbeats travel in Fetch `extension`s as msgpack **maps** with exactly these keys:", ""]
    rows += ["| map | direction | keys |", "|---|---|---|"]
    rows.append(f"| `BrokerHeartbeat` | FetchRequest, broker → controller | {_fields(_requests.BrokerHeartbeat)} |")
    rows.append(f"| `HeartbeatReply` | FetchResponse, controller → broker | {_fields(_requests.HeartbeatReply)} |")
    return "\n".join(rows)


def records_section() -> str:
    rows = ["| code | record | version | fields, in order |", "|---|---|---|---|"]
    for cls in sorted(_records.RECORD_TYPES, key=lambda cls: cls.TYPE_CODE):
        rows.append(f"| {cls.TYPE_CODE} | `{cls.__name__}` | {_records._RECORD_VERSION} | {_fields(cls)} |")
    return "\n".join(rows)


def broker_section() -> str:
    rows = ["| `op` | required fields | optional fields |", "|---|---|---|"]
    for op in broker_protocol.OPS:
        optional_fields = broker_protocol._OPTIONAL_FIELDS | broker_protocol._OP_OPTIONAL_FIELDS.get(op, frozenset())
        optional = ", ".join(f"`{name}`" for name in sorted(optional_fields))
        required = ", ".join(f"`{name}`" for name in sorted(broker_protocol._OP_FIELDS[op])) or "—"
        rows.append(f"| `{op}` | {required} | {optional} |")
    common = [field.name for field in dataclasses.fields(broker_protocol.MetadataResponse) if field.name != "body"]
    rows += ["", "Every answer is a map with " + ", ".join(f"`{name}`" for name in common) + ", plus the op's own keys."]
    return "\n".join(rows)


def errors_section() -> str:
    codes: dict[int, str] = {}
    used_by: dict[int, list[str]] = {}
    for layer, enum in ERROR_ENUMS:
        for member in enum:
            if codes.setdefault(member.value, member.name) != member.name:
                raise ValueError(f"code {member.value} is {codes[member.value]} in one enum and {member.name} in {layer}'s")
            used_by.setdefault(member.value, []).append(layer)
    rows = ["| code | name | defined by | what the receiver does |", "|---|---|---|---|"]
    for value in sorted(codes):
        name = codes[value]
        if name not in CLIENT_ACTION:
            raise KeyError(f"error code {name} ({value}) has no CLIENT_ACTION entry in {MODULE}")
        rows.append(f"| {value} | `{name}` | {', '.join(used_by[value])} | {CLIENT_ACTION[name]} |")
    return "\n".join(rows)


SECTIONS = {
    "messages": messages_section,
    "controller": controller_section,
    "records": records_section,
    "broker": broker_section,
    "errors": errors_section,
}


def render(name: str) -> str:
    return "\n".join([begin_marker(name), SECTIONS[name](), END_MARKER])


def current_sections(markdown: str) -> dict[str, str]:
    """The generated sections as the page holds them, markers included."""
    found = {}
    for name in SECTIONS:
        begin = markdown.find(begin_marker(name))
        if begin < 0:
            continue
        end = markdown.index(END_MARKER, begin) + len(END_MARKER)
        found[name] = markdown[begin:end]
    return found


def rewrite(markdown: str) -> str:
    for name, old in current_sections(markdown).items():
        markdown = markdown.replace(old, render(name))
    return markdown


def main(argv: list[str]) -> None:
    if argv == ["--write"]:
        PROTOCOL_MD.write_text(rewrite(PROTOCOL_MD.read_text()))
    else:
        for name in argv or list(SECTIONS):
            print(render(name), end="\n\n")


if __name__ == "__main__":
    main(sys.argv[1:])
