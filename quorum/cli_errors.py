"""How every pykraft command line reports an error (issue 18).

One mechanism for ``kraft-quorum``, ``kraft-controller``, ``kraft-topics``,
``kraft-cluster``, ``kraft-broker`` and ``jepsen-like``: a command made with
``cls=ReportingGroup`` (or ``ReportingCommand``) takes a ``--debug`` flag,
and any exception that escapes it is turned into at most two lines on
stderr, ``Error: <what happened>`` and a hint of what to do, with the exit
status of the table below. The traceback is printed only with ``--debug``.

trio wraps what fails inside a nursery in ``ExceptionGroup``s, nested once
per nursery; ``root_cause`` unwraps them to the error that really happened
(the one that is not a consequence of another's cancellation).

Exit statuses (docs/operations.md, "Errors and exit codes"):

====  ======================================================================
0     done
1     the cluster answered and the answer is no (a refused request, an
      unknown topic), or a check found a problem
2     a usage error: a bad flag or setting (click's own); no TLS and no
      ``--plaintext`` for a listener; a plaintext client to a TLS node
3     the node refused its data directory, or the directory failed
4     not a node's data directory (``check-storage``, ``dump-log``;
      ``quorum.storage.EXIT_NOT_A_DATA_DIR``)
5     the data directory is in use by a running process (``check-storage``)
6     the cluster did not serve the request: no node answered in time, the
      nodes belong to another cluster, or the answer was lost on the way
7     the operating system refused: an address in use, a missing folder, no
      permission, a full disk
70    an unexpected error, most likely a bug in pykraft (``EX_SOFTWARE``)
====  ======================================================================
"""

from __future__ import annotations

import errno
import sys
import traceback
from pathlib import PurePath
from typing import Any

import click

from ._node import QuorumError, QuorumInvariantError
from ._errors import leaf_exceptions

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STORAGE_REFUSED = 3
EXIT_UNREACHABLE = 6
EXIT_OS_ERROR = 7
EXIT_BUG = 70

# Keys in click's ``Context.meta`` (shared by a context and its children).
# What --log-level takes (every process): a typo is a usage error, not a
# silent INFO.
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False)

_DEBUG_KEY = "pykraft.debug"
_LISTEN_KEY = "pykraft.listen_addresses"


class CommandError(click.ClickException):
    """An error the user can act on: one sentence saying what happened, an
    optional hint saying what to do (printed on a second line), and the exit
    status. Raise it from a command; ``ReportingGroup`` prints it."""

    def __init__(self, sentence: str, *, hint: str | None = None, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(sentence if hint is None else f"{sentence}\n{hint}")
        self.sentence = sentence
        self.hint = hint
        self.exit_code = exit_code


# A settings file is a page or two; one larger is not one.
CONFIG_BYTES_MAX = 1024 * 1024


def load_toml(path: str, option: str) -> dict[str, Any]:
    """The settings of a TOML file named by ``option`` (``--config``, say).
    Raises ``click.UsageError`` (exit 2) naming the file and what is wrong
    with it: unreadable, not a regular file, over ``CONFIG_BYTES_MAX``, not
    UTF-8, not TOML, or nested deeper than the parser's stack. The file is
    the user's input, never a bug of ours."""
    import tomllib

    from .runtime import read_small_file

    try:
        text = read_small_file(path, CONFIG_BYTES_MAX).decode("utf-8")
        return tomllib.loads(text)
    except OSError as error:
        raise click.UsageError(f"cannot read {option} {path}: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise click.UsageError(f"{option} {path} is not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise click.UsageError(f"{option} {path} is not valid TOML: byte {error.start} is not UTF-8") from None
    except RecursionError:
        raise click.UsageError(f"{option} {path}: a value nests too deeply") from None
    except ValueError as error:
        raise click.UsageError(f"cannot use {option} {path}: {error}") from None


def root_cause(error: BaseException) -> BaseException:
    """The error that really happened inside ``error``'s exception groups.

    A ``KeyboardInterrupt`` wins (the user asked to stop); otherwise the
    first ``Exception`` leaf: the others in the same group are, in trio,
    usually consequences of it (a cancelled sibling raises
    ``trio.Cancelled``, a ``BaseException``, which is skipped). A group of
    only such leaves gives its first leaf."""
    leaves = leaf_exceptions(error)
    for leaf in leaves:
        if isinstance(leaf, KeyboardInterrupt):
            return leaf
    for leaf in leaves:
        if isinstance(leaf, Exception):
            return leaf
    return leaves[0]


def record_listen_addresses(addresses: dict[str, tuple[str, int] | None]) -> None:
    """Note, for an "address in use" error, the addresses the running
    command listens on, by the flag that set them (``{"--listen": (host,
    port)}``; None values are skipped). Call it from inside a command."""
    context = click.get_current_context(silent=True)
    if context is None:
        return
    context.meta[_LISTEN_KEY] = [
        f"{address[0]}:{address[1]} ({flag})" for flag, address in addresses.items() if address is not None
    ]


def describe_error(
    error: BaseException, *, listen_addresses: list[str] | tuple[str, ...] = ()
) -> click.ClickException | click.Abort | click.exceptions.Exit:
    """The one or two lines and exit status for ``error`` (after unwrapping
    its exception groups), as the click exception that prints them.

    ``listen_addresses`` name what the command listens on, for "address in
    use". click's own exceptions (a ``ClickException``, ``Abort``, ``Exit``)
    come back unchanged; ``KeyboardInterrupt`` becomes ``click.Abort``.
    Never raises."""
    cause = root_cause(error)
    if isinstance(cause, (click.ClickException, click.Abort, click.exceptions.Exit)):
        return cause
    if isinstance(cause, KeyboardInterrupt):
        return click.Abort()
    if isinstance(cause, OSError):
        return _describe_os_error(cause, listen_addresses)
    if isinstance(cause, QuorumError):
        return _describe_quorum_error(cause)
    return _unexpected(cause)


def _describe_quorum_error(error: QuorumError) -> click.ClickException:
    # Imported here, not at the top: a command line that never talks to a
    # cluster or a disk (``jepsen-like check``) must not load the runtime,
    # storage or client to be able to report its own errors.
    from .client import (
        IndeterminateError,
        NotAuthorizedError,
        QuorumClientError,
        TlsRequiredError,
        VoterChangeRefusedError,
        WrongClusterError,
    )
    from .storage import StorageError

    text = _sentence(str(error))
    if isinstance(error, StorageError):
        # Storage errors are written for the operator: the reason and what
        # to do, in one sentence (quorum/storage/_errors.py).
        return CommandError(text, exit_code=EXIT_STORAGE_REFUSED)
    if isinstance(error, WrongClusterError):
        return CommandError(
            text, hint="Give --cluster-id the id the cluster's nodes run with.", exit_code=EXIT_UNREACHABLE
        )
    if isinstance(error, NotAuthorizedError):
        return CommandError(
            text, hint="Use a client certificate the cluster's ACL file allows (docs/security.md, \"ACLs\").", exit_code=EXIT_FAILED
        )
    if isinstance(error, TlsRequiredError):
        # The sentence says what to give; nothing was acted on.
        return CommandError(text, exit_code=EXIT_USAGE)
    if isinstance(error, VoterChangeRefusedError):
        return CommandError(text, hint=_VOTER_CHANGE_HINTS.get(error.code.name), exit_code=EXIT_FAILED)
    if isinstance(error, IndeterminateError):
        return CommandError(
            text, hint="The request may or may not have taken effect: read before you retry it.", exit_code=EXIT_UNREACHABLE
        )
    if isinstance(error, QuorumClientError):
        return CommandError(
            text,
            hint="Check --bootstrap (and --cluster-id) and that the nodes are running; --timeout-s waits longer.",
            exit_code=EXIT_UNREACHABLE,
        )
    if isinstance(error, QuorumInvariantError):
        return _unexpected(error)
    return CommandError(text, exit_code=EXIT_FAILED)


# What to do when the leader refuses a voter change (docs/operations.md,
# "Replacing a voter"), by the answer's error code.
_VOTER_CHANGE_HINTS = {
    "VOTER_NOT_CAUGHT_UP": "Start the node (as an observer), wait until describe --replication shows it caught up, then retry.",
    "DUPLICATE_VOTER": "It is a voter already (describe shows the set); to replace its disk, remove-voter it first.",
    "VOTER_NOT_FOUND": "Check the node id and --directory-id against kraft-quorum describe --replication.",
    "INVALID_REQUEST": "The last voter cannot be removed.",
    "VOTERS_STATIC": "Run kraft-quorum upgrade-voters once (docs/operations.md, \"Upgrading static voters to dynamic\"), "
    "then retry.",
}


def _describe_os_error(error: OSError, listen_addresses: list[str] | tuple[str, ...]) -> click.ClickException:
    reason = (error.strerror or str(error)).rstrip(".")
    reason = reason[:1].lower() + reason[1:]
    if error.errno == errno.EADDRINUSE:
        where = " or ".join(listen_addresses) if listen_addresses else "this process's address"
        return CommandError(
            f"cannot listen on {where}: {reason}.",
            hint="Another process (another node?) holds the port: stop it, or give this one another address.",
            exit_code=EXIT_OS_ERROR,
        )
    if error.errno is not None and error.errno < 0:
        # getaddrinfo's own codes (socket.gaierror's EAI_*, the only negative
        # errnos): the host name to listen on does not resolve; the message
        # alone names nothing.
        where = " or ".join(listen_addresses) if listen_addresses else "this process's address"
        return CommandError(
            f"cannot listen on {where}: the host name does not resolve ({reason}).",
            hint="Give a host name this machine resolves (`getent hosts NAME` shows it), or an IP address.",
            exit_code=EXIT_OS_ERROR,
        )
    if error.errno == errno.EADDRNOTAVAIL:
        where = " or ".join(listen_addresses) if listen_addresses else "this process's address"
        return CommandError(
            f"cannot listen on {where}: {reason}.",
            hint="Give an address of this host (127.0.0.1, or one `ip addr` lists).",
            exit_code=EXIT_OS_ERROR,
        )
    path = error.filename if isinstance(error.filename, str) else None
    if error.errno == errno.ENOENT and path is not None:
        folder = PurePath(path).parent
        return CommandError(
            f"cannot open {path}: {reason}.",
            hint=f"If its folder is what is missing, create it first (mkdir -p {folder}), or give another path.",
            exit_code=EXIT_OS_ERROR,
        )
    if error.errno in (errno.EACCES, errno.EPERM) and path is not None:
        return CommandError(
            f"cannot open {path}: {reason}.",
            hint="Run as a user that may write there, or give another path.",
            exit_code=EXIT_OS_ERROR,
        )
    if error.errno == errno.ENOSPC:
        where = f" ({path})" if path is not None else ""
        return CommandError(f"the disk is full{where}.", hint="Free some space, then start again.", exit_code=EXIT_OS_ERROR)
    where = f" ({path})" if path is not None else ""
    return CommandError(f"{reason}{where}.", exit_code=EXIT_OS_ERROR)


def _unexpected(error: BaseException) -> click.ClickException:
    return CommandError(
        f"unexpected {type(error).__name__}: {_sentence(str(error)) or '(no message)'}",
        hint="This is most likely a bug in pykraft: run the command again with --debug and report the traceback.",
        exit_code=EXIT_BUG,
    )


def _sentence(text: str) -> str:
    """``text`` on one line, ending with a full stop."""
    text = " ".join(text.split())
    return text if not text or text.endswith((".", "?", "!")) else f"{text}."


_EPILOG = (
    "An error prints one or two lines and exits with the status docs/operations.md lists under "
    "'Errors and exit codes'; --debug adds the traceback."
)


def _remember_debug(context: click.Context, _parameter: click.Parameter, value: bool) -> None:
    if value:
        context.meta[_DEBUG_KEY] = True


class _Reporting:
    """Adds ``--debug`` and reports what escapes ``invoke``; mixed into a
    click ``Group`` or ``Command`` (the group's covers its subcommands)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", _EPILOG)
        super().__init__(*args, **kwargs)
        self.params.append(  # type: ignore[attr-defined]
            click.Option(
                ["--debug"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_remember_debug,
                help="On an error, also print its traceback.",
            )
        )

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except OSError as error:
            if error.errno == errno.EPIPE:
                raise  # stdout closed (``| head``): click handles it quietly
            raise self._report(ctx, error) from error
        except BaseException as error:
            raise self._report(ctx, error) from error

    @staticmethod
    def _report(ctx: click.Context, error: BaseException) -> BaseException:
        if ctx.meta.get(_DEBUG_KEY):
            traceback.print_exception(error, file=sys.stderr)
        return describe_error(error, listen_addresses=ctx.meta.get(_LISTEN_KEY, ()))


class ReportingGroup(_Reporting, click.Group):
    """A click group that takes ``--debug`` and reports errors as the
    module docstring says."""


class ReportingCommand(_Reporting, click.Command):
    """A click command that takes ``--debug`` and reports errors as the
    module docstring says."""


__all__ = [
    "EXIT_BUG",
    "EXIT_FAILED",
    "EXIT_OS_ERROR",
    "EXIT_STORAGE_REFUSED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "CommandError",
    "ReportingCommand",
    "ReportingGroup",
    "describe_error",
    "leaf_exceptions",
    "record_listen_addresses",
    "root_cause",
]
