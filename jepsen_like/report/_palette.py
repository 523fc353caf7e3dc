"""The report's colours, defined once: one colour per meaning.

Every colour a legend shows (a role, a broker state, an outcome, an op type,
a kind of fault, a witness, two leaders at once, the staleness plot's marks)
comes from here, and no two
meanings share one: ``tests/report/test_report_palette.py`` holds every pair
of them at least ``MIN_DISTANCE`` apart (RGB distance), and the browser test
checks the rendered legends. Colours that carry no meaning of their own
(text, borders, grid lines) stay in the stylesheet.
"""

from __future__ import annotations

import math

#: A controller's Raft role: fill, text colour, vertical inset (px), short label.
ROLE_STYLE = {
    "leader": ("#1e3a8a", "#ffffff", 0, "L"),
    "candidate": ("#fb923c", "#1f2937", 5, "C"),
    "prospective": ("#fcd34d", "#1f2937", 5, "P"),
    "follower": ("#86efac", "#14532d", 5, "F"),
    "unattached": ("#e2e8f0", "#334155", 7, "U"),
    "resigned": ("#a8a29e", "#ffffff", 5, "R"),
}
#: A broker's lifecycle state (seed 001), drawn in its lane like a role.
BROKER_STATE_STYLE = {
    "online": ("#0d9488", "#ffffff", 2, "On"),
    "fenced": ("#fca5a5", "#7f1d1d", 5, "Fe"),
    "stopping": ("#c4b5fd", "#3b0764", 5, "St"),
    "offline": ("#d6c7b4", "#44403c", 7, "Off"),
}
#: A role the report does not know (never in a legend).
OTHER_ROLE = ("#cbd5e1", "#1f2937", 7, "?")

#: How an operation ended.
OUTCOME_COLOURS = {"ok": "#2563eb", "fail": "#dc2626", "info": "#d97706"}

#: Op types in the order ``_load.OP_ORDER`` lists them get these, one each;
#: any op type past the last shares ``OTHER_OP_COLOUR`` and is drawn (and
#: named in the legend) as "other op types".
OP_COLOURS = (
    "#60a5fa", "#34d399", "#a78bfa", "#f472b6", "#22d3ee",
    "#e879f9", "#facc15", "#65a30d", "#6366f1", "#fb7185",
)  # fmt: skip
OTHER_OP_COLOUR = "#0369a1"

#: Marks that each mean one thing.
FAULT = "#f43f5e"  # a fault window (shaded), a network fault's target
DOWN = "#475569"  # a node killed or paused
HOSTILE = "#9a3412"  # hostile client traffic at a node's port
DISK = "#7c3aed"  # a storage fault: the node's files damaged, or its disk full
WITNESS = "#c026d3"  # an operation an anomaly's witness names
TWO_LEADERS = "#f0abfc"  # two nodes each believing they lead
HEAL = "#15803d"  # a heal of every fault (a line)
VOTERS = "#06b6d4"  # a voter change (KIP-853), and a controller outside the voter set
VOTERS_PALE = "#ecfeff"  # the light stripes of a voter change's band
#: The staleness plot: a group's reads (its bar, tinted; the median dot and
#: the p99 tick), a group with reads beyond its mode's bound (its bar,
#: tinted, and the count in the tables), and that bound (a dashed line).
STALENESS = "#4338ca"
BEYOND_BOUND = "#be185d"
STALENESS_BOUND = "#111827"
#: The memory chart (a campaign's memory.csv): the harness's resident set
#: and the node processes' summed resident set, a line each.
MEMORY_HARNESS = "#581c87"
MEMORY_NODES = "#3f6212"

#: Two colours with different meanings are at least this far apart in RGB.
MIN_DISTANCE = 45.0


def meanings() -> dict[str, str]:
    """Every colour with a meaning, by that meaning (for the tests and for
    whoever adds one: it must not come close to any other)."""
    found = {f"role {name}": style[0] for name, style in ROLE_STYLE.items()}
    found.update({f"broker {name}": style[0] for name, style in BROKER_STATE_STYLE.items()})
    found.update({f"outcome {name}": colour for name, colour in OUTCOME_COLOURS.items()})
    found.update({f"op type #{position + 1}": colour for position, colour in enumerate(OP_COLOURS)})
    found["other op types"] = OTHER_OP_COLOUR
    found.update(
        {"fault": FAULT, "down": DOWN, "hostile": HOSTILE, "disk": DISK, "witness": WITNESS, "two leaders": TWO_LEADERS, "heal": HEAL,
         "voters": VOTERS, "staleness": STALENESS, "beyond the staleness bound": BEYOND_BOUND,
         "staleness bound": STALENESS_BOUND, "harness memory": MEMORY_HARNESS, "nodes' memory": MEMORY_NODES}
    )
    return found


def distance(a: str, b: str) -> float:
    """RGB distance between two ``#rrggbb`` colours. Raises ValueError for
    any other form."""
    return math.dist(_rgb(a), _rgb(b))


def _rgb(colour: str) -> tuple[int, int, int]:
    if len(colour) != 7 or colour[0] != "#":
        raise ValueError(f"not a #rrggbb colour: {colour!r}")
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def op_colours(op_types: list[str]) -> dict[str, str]:
    """Each op type's colour: its own for the first ``len(OP_COLOURS)``,
    ``OTHER_OP_COLOUR`` for the rest."""
    return {f: OP_COLOURS[i] if i < len(OP_COLOURS) else OTHER_OP_COLOUR for i, f in enumerate(op_types)}


def rgba(colour: str, alpha: float) -> str:
    """``colour`` with transparency, for CSS. Raises ValueError as ``distance``."""
    r, g, b = _rgb(colour)
    return f"rgba({r},{g},{b},{alpha:g})"
