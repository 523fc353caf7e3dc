"""Errors of the network fault layer.

They say whose fault it was: a bad request from the caller (``ValueError``,
``UnknownMemberError``), a fault this backend cannot make
(``UnsupportedFaultError``), or the machinery underneath failing
(``ProxyError`` and its kin, ``NetnsError``).
"""

from __future__ import annotations


class NemesisError(Exception):
    """Base class of every error raised by ``jepsen_like.nemesis``."""


class UnknownMemberError(NemesisError, KeyError):
    """A node or client id that was never added to the topology."""

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return str(self.args[0]) if self.args else "unknown member"


class UnsupportedFaultError(NemesisError):
    """The backend cannot inject this fault (e.g. delay in netns mode,
    where ``tc netem`` is not available)."""


class ProxyError(NemesisError):
    """The proxy process failed to start, died, or stopped answering."""


class ProxyCommandError(ProxyError):
    """The proxy refused a command (unknown link, bad mode, port in use);
    ``kind`` names the error type raised inside the proxy."""

    def __init__(self, message: str, kind: str = "Error") -> None:
        super().__init__(message)
        self.kind = kind


class NetnsError(NemesisError):
    """An ``ip``/``iptables``/``nft`` command failed, or cleanup left
    something behind."""


class NetnsUnavailableError(NetnsError):
    """This machine cannot run the netns backend (not root, tools missing,
    namespaces not permitted); the message says which."""
