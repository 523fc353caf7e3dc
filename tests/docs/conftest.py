"""Import paths for the docs tests.

pytest puts ``tests/`` on sys.path, where ``tests/broker_agent`` and
``tests/registration`` would pass for namespace packages and shadow the real
ones; the repository root goes first (as in tests/broker_agent/conftest.py).
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT in sys.path:
    sys.path.remove(_ROOT)
sys.path.insert(0, _ROOT)
