"""Import paths for the registration tests.

- ``_registration_helpers`` (next to this file) is imported by name.
- pytest puts ``tests/`` on sys.path, where this directory would pass for a
  namespace package named ``registration`` and shadow the real one when the
  working directory is not the repository root; the repository root goes
  first (as in ``tests/quorum/conftest.py``).
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE.parents[1]), str(_HERE)):
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)
