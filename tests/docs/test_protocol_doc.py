"""docs/protocol.md lists every message, record and error code the code
defines, and its generated tables are those the code prints today."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import re
import sys

import pytest

from quorum.wire._schema import SCHEMAS
from tests.docs import protocol_reference as reference

PAGE = reference.PROTOCOL_MD.read_text()


@pytest.mark.parametrize("name", list(reference.SECTIONS))
def test_generated_section_is_current(name):
    sections = reference.current_sections(PAGE)
    assert name in sections, f"protocol.md lacks the generated section {name!r}"
    assert sections[name] == reference.render(name), (
        f"protocol.md's {name!r} section is out of date: run .venv/bin/python -m tests.docs.protocol_reference --write"
    )


def message_section(schema) -> str:
    match = re.search(rf"^### {schema.type_code} {schema.name}\n(.*?)(?=^##)", PAGE, re.M | re.S)
    assert match, f"protocol.md has no section '### {schema.type_code} {schema.name}'"
    return match.group(1)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda schema: schema.name)
def test_every_message_type_has_a_section_naming_its_fields(schema):
    text = message_section(schema)
    for field in dataclasses.fields(schema.message_class):
        assert re.search(rf"`{field.name}`|\b{field.name}\b", text), f"{schema.name}: field {field.name} is not described"


def wire_examples() -> dict:
    path = reference.ROOT / "tests" / "wire" / "_wire_strategies.py"
    spec = importlib.util.spec_from_file_location("_wire_strategies_for_docs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.EXAMPLES


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda schema: schema.name)
def test_the_documented_field_order_is_the_wire_order(schema):
    """The generated table lists a message's dataclass fields; the encoder
    must put them on the wire in that order."""
    example = wire_examples()[schema.message_class]
    # The latest version's body; a versioned message's ``version`` is the
    # envelope's, not a body field.
    body = schema.codec(schema.versions[-1])[0](example)
    names = [
        field.name
        for field in dataclasses.fields(schema.message_class)
        if not (field.name == "version" and schema.later_versions) and field.name not in schema.connection_fields
    ]
    assert len(body) == len(names)
    for position, name in enumerate(names):
        value = getattr(example, name)
        if value is None or isinstance(value, (bool, int, str, bytes)):
            assert body[position] == value, f"{schema.name}: wire position {position} is not {name}"


def test_every_error_code_of_every_layer_is_in_the_page():
    for _, codes in reference.ERROR_ENUMS:
        assert issubclass(codes, enum.IntEnum)
        for member in codes:
            assert f"| {member.value} | `{member.name}` |" in PAGE, member
