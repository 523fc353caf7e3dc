"""Errors the checker raises about its input."""

from __future__ import annotations


class HistoryFormatError(ValueError):
    """A history, node event log, log dump or meta file does not follow the
    format in docs/checker.md. The message names the file and, where it can,
    the line or event index: it is the input's fault, not the checker's."""
