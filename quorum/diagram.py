"""Print the Raft-roles section of docs/raft.md, generated from the
role-transition table the core checks every role change against
(``quorum/_roles.py``):

    python -m quorum.diagram

The docs embed this output verbatim; a test fails when they drift apart.
The markers are those of ``registration.diagram`` (which this layer may not
import: dependencies point from registration to quorum).
"""

from __future__ import annotations

from ._roles import state_diagram_mermaid, transition_table_markdown

MODULE = "quorum.diagram"
BEGIN_MARKER = f"<!-- BEGIN GENERATED: python -m {MODULE} -->"
END_MARKER = "<!-- END GENERATED -->"

__all__ = ["BEGIN_MARKER", "END_MARKER", "render"]


def render() -> str:
    """The generated markdown, markers included: the mermaid state diagram,
    then the table it is drawn from."""
    return "\n".join(
        [BEGIN_MARKER, "```mermaid", state_diagram_mermaid(), "```", "", transition_table_markdown(), END_MARKER]
    )


def main() -> None:
    print(render())


if __name__ == "__main__":
    main()
