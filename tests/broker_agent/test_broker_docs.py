"""docs/broker.md embeds exactly what ``python -m broker_agent.diagram``
prints, and its code sample matches the example file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from broker_agent.diagram import BEGIN_MARKER, END_MARKER, render

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "broker.md"


def test_docs_embed_the_generated_lifecycle_section_verbatim():
    text = DOCS.read_text()
    assert text.count(BEGIN_MARKER) == 1 and text.count(END_MARKER) == 1
    start = text.index(BEGIN_MARKER)
    end = text.index(END_MARKER) + len(END_MARKER)
    assert text[start:end] == render(), "regenerate with: python -m broker_agent.diagram"


def test_the_diagram_module_prints_the_section():
    printed = subprocess.run(
        [sys.executable, "-m", "broker_agent.diagram"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert printed == render() + "\n"


def test_the_docs_show_the_examples_service_as_it_is():
    example = (ROOT / "examples" / "partition_leader_service.py").read_text()
    start = example.index("async def run_instance(")
    end = example.index("\n\n\n", start)
    assert example[start:end] in DOCS.read_text()
