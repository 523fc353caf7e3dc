"""Import paths for the rule tests of the quorum core.

- ``harness`` (next to this file) is imported by name, whatever pytest's
  import mode.
- pytest puts ``tests/`` on sys.path (for ``tests/conftest.py``), where this
  directory, ``tests/quorum``, would pass for a namespace package named
  ``quorum`` and shadow the real one whenever the working directory is not
  the repository root (the editable install's finder comes after the path
  finder). The repository root goes first so that ``quorum`` is the core.
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE.parents[1]), str(_HERE)):
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)
