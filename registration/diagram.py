"""Print the broker-lifecycle section of docs/registration.md, generated from
the transition table the controller uses:

    python -m registration.diagram

The docs embed this output verbatim; a test fails when they drift apart.
"""

from __future__ import annotations

from ._lifecycle import state_diagram_mermaid, transition_table_markdown

BEGIN_MARKER = "<!-- BEGIN GENERATED: python -m registration.diagram -->"
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
