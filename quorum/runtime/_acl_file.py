"""The ACL file a node reads, and reads again on SIGHUP (issue 16;
docs/security.md, "ACLs"). The rules themselves are sans-IO
(``quorum.parse_acl``)."""

from __future__ import annotations

import logging
from pathlib import Path

from .._access import ACL_BYTES_MAX, AccessControlList, parse_acl

logger = logging.getLogger("pykraft.acl")


class AclFile:
    """The ACL in force: from ``path``, or the defaults (reads for every
    authenticated principal, administration for none) when ``path`` is
    None. Raises ``ValueError`` or ``OSError`` on construction for a file
    that cannot be used."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path is not None else None
        self.acl = AccessControlList()
        self.reload()

    def reload(self) -> None:
        """Read the file again. On failure (``ValueError``, ``OSError``) the
        ACL in force stays."""
        if self.path is None:
            return
        with open(self.path, "rb") as handle:
            data = handle.read(ACL_BYTES_MAX + 1)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{self.path} is not UTF-8: {error}") from None
        self.acl = parse_acl(text, str(self.path))
        logger.info("ACL loaded from %s: %d grants", self.path, len(self.acl.grants))
