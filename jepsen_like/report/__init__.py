"""``report.html`` for a campaign run: one self-contained page that opens
offline (see docs/report.md).

    from jepsen_like.report import write_report
    write_report(run_dir)            # -> run_dir / "report.html"

or ``python -m jepsen_like.report RUN_DIR [--out FILE]``.

The role colours and the two-leaders colour, the SVG helpers and
``concurrent_leaders`` (the periods with two leaders at once) are exported
too: the simulator's replay page (``jepsen_like.sim``) draws with them.
"""

from ._html import render_report, write_report
from ._leaders import concurrent_leaders
from ._load import RunData, load_run
from ._palette import ROLE_STYLE, TWO_LEADERS
from ._svg import esc, linear_ticks, num, script_json, tick_label

__all__ = [
    "ROLE_STYLE",
    "TWO_LEADERS",
    "RunData",
    "concurrent_leaders",
    "esc",
    "linear_ticks",
    "load_run",
    "num",
    "render_report",
    "script_json",
    "tick_label",
    "write_report",
]
