"""Import paths for the broker-agent tests.

pytest puts ``tests/`` on sys.path, where this directory would pass for a
namespace package named ``broker_agent`` and shadow the real one; the
repository root goes first (as in ``tests/registration/conftest.py``), and
this directory next, for the helpers imported by name.
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE.parents[1]), str(_HERE)):
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)


def pytest_terminal_summary(terminalreporter):
    """The real-process figures (detection, bounce → online, pause
    recovery), in the run's output even without ``-s``."""
    module = sys.modules.get("test_broker_processes")
    figures = getattr(module, "FIGURES", None)
    if not figures:
        return
    terminalreporter.write_sep("-", "broker figures (tests/broker_agent/test_broker_processes.py)")
    for name, value in figures.items():
        terminalreporter.write_line(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
