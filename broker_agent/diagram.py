"""Print the broker-lifecycle section of docs/broker.md, generated from the
transition table the broker uses:

    python -m broker_agent.diagram

The docs embed this output verbatim; a test fails when they drift apart.
"""

from __future__ import annotations

from quorum.diagram import END_MARKER, begin_marker, generated_section

from ._lifecycle import state_diagram_mermaid, transition_table_markdown

BEGIN_MARKER = begin_marker("broker_agent.diagram")
__all__ = ["BEGIN_MARKER", "END_MARKER", "render"]


def render() -> str:
    """The generated markdown, markers included."""
    return generated_section("broker_agent.diagram", state_diagram_mermaid(), transition_table_markdown())


def main() -> None:
    print(render())


if __name__ == "__main__":
    main()
