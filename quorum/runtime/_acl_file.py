"""The ACL file a node reads, and reads again on SIGHUP (issue 16;
docs/security.md, "ACLs"). The rules themselves are sans-IO
(``quorum.parse_acl``)."""

from __future__ import annotations

import logging
from pathlib import Path

from .._access import ACL_BYTES_MAX, AccessControlList, parse_acl
from .._node import QuorumError
from ._small_files import read_small_file

logger = logging.getLogger("pykraft.acl")


class AclFileError(QuorumError, ValueError):
    """The ACL file cannot be used: unreadable, not a regular file, too
    large, not UTF-8, or a line that is not a grant. The message names the
    file and, for a bad grant, its line. A ``ValueError`` too, as before."""


class AclFile:
    """The ACL in force: from ``path``, or the defaults (reads for every
    authenticated principal, administration for none) when ``path`` is
    None. Raises ``ValueError`` or ``OSError`` on construction for a file
    that cannot be used (``AclFileError``, a ``ValueError``)."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path is not None else None
        self.acl = AccessControlList()
        self.reload()

    def reload(self) -> None:
        """Read the file again. On failure (``AclFileError``, ``OSError``)
        the ACL in force stays."""
        if self.path is None:
            return
        try:
            text = read_small_file(self.path, ACL_BYTES_MAX).decode("utf-8")
            acl = parse_acl(text, str(self.path))
        except UnicodeDecodeError as error:
            raise AclFileError(f"the ACL file cannot be used: {self.path} is not UTF-8 ({error})") from None
        except ValueError as error:
            raise AclFileError(f"the ACL file cannot be used: {error}") from None
        self.acl = acl
        logger.info("ACL loaded from %s: %d grants", self.path, len(self.acl.grants))
