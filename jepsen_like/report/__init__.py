"""``report.html`` for a campaign run: one self-contained page that opens
offline (see docs/report.md).

    from jepsen_like.report import write_report
    write_report(run_dir)            # -> run_dir / "report.html"

or ``python -m jepsen_like.report RUN_DIR [--out FILE]``.
"""

from ._html import render_report, write_report
from ._load import RunData, load_run

__all__ = ["RunData", "load_run", "render_report", "write_report"]
