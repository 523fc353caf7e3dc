"""Print the broker-lifecycle section of docs/registration.md, generated from
the transition table the controller uses:

    python -m registration.diagram

The docs embed this output verbatim; a test fails when they drift apart.
"""

from __future__ import annotations

from quorum.diagram import END_MARKER, begin_marker, generated_section

from ._lifecycle import state_diagram_mermaid, transition_table_markdown

BEGIN_MARKER = begin_marker("registration.diagram")

__all__ = ["BEGIN_MARKER", "END_MARKER", "render"]


def render() -> str:
    """The generated markdown, markers included."""
    return generated_section("registration.diagram", state_diagram_mermaid(), transition_table_markdown())


def main() -> None:
    print(render())


if __name__ == "__main__":
    main()
