"""Print the broker-lifecycle section of docs/broker.md, generated from the
transition table the broker uses:

    python -m broker_agent.diagram

The docs embed this output verbatim; a test fails when they drift apart.
"""

from __future__ import annotations

from ._lifecycle import state_diagram_mermaid, transition_table_markdown

BEGIN_MARKER = "<!-- BEGIN GENERATED: python -m broker_agent.diagram -->"
END_MARKER = "<!-- END GENERATED -->"


def render() -> str:
    """The generated markdown, markers included."""
    return "\n".join(
        [
            BEGIN_MARKER,
            "```mermaid",
            state_diagram_mermaid(),
            "```",
            "",
            transition_table_markdown(),
            END_MARKER,
        ]
    )


def main() -> None:
    print(render())


if __name__ == "__main__":
    main()
