"""TLS options shared by every command line (issue 16; docs/security.md).

A client command takes ``--tls-ca``, ``--tls-cert`` and ``--tls-key``, or
``--command-config FILE`` (a TOML file with ``tls_ca``, ``tls_cert`` and
``tls_key``, as Kafka's ``--command-config``); flags win over the file.
Node processes take the same three settings in their own options or
``--config`` file, plus ``acl_file`` and ``plaintext``. A process that
listens (``kraft-quorum node``, ``kraft-controller``, ``kraft-broker``)
must choose: the three TLS settings, or ``--plaintext`` (``plaintext =
true``); with neither it refuses to start (``listener_tls``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .cli_errors import EXIT_USAGE, CommandError, load_toml
from .runtime import TlsConfig

TLS_KEYS = ("tls_ca", "tls_cert", "tls_key")
_FILE = click.Path(exists=True, dir_okay=False)


def tls_client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--tls-ca/--tls-cert/--tls-key/--command-config`` to a client
    command; it receives them as ``tls_ca``, ``tls_cert``, ``tls_key`` and
    ``command_config`` (give them to ``client_tls``)."""
    for option in reversed(
        [
            click.option("--tls-ca", type=_FILE, help="CA bundle (PEM) that signed the servers' certificates."),
            click.option("--tls-cert", type=_FILE, help="This client's certificate (PEM)."),
            click.option("--tls-key", type=_FILE, help="This client's private key (PEM)."),
            click.option("--command-config", type=_FILE, help="A TOML file with tls_ca, tls_cert and tls_key."),
        ]
    ):
        command = option(command)
    return command


def client_tls(
    tls_ca: str | None, tls_cert: str | None, tls_key: str | None, command_config: str | None
) -> TlsConfig | None:
    """The client's ``TlsConfig`` (None: plaintext). Raises
    ``click.UsageError`` for an unreadable or incomplete setting, and
    ``TlsError`` for files that cannot be used."""
    settings: dict[str, Any] = {}
    if command_config is not None:
        settings = load_toml(command_config, "--command-config")
        unknown = sorted(set(settings) - set(TLS_KEYS))
        if unknown:
            raise click.UsageError(f"unknown settings in {command_config}: {', '.join(unknown)} (known: {', '.join(TLS_KEYS)})")
        base = Path(command_config).parent
        settings = {key: str(base / value) for key, value in settings.items()}
    for key, value in zip(TLS_KEYS, (tls_ca, tls_cert, tls_key)):
        if value is not None:
            settings[key] = value
    return tls_from_settings(settings)


def tls_from_settings(settings: dict[str, Any]) -> TlsConfig | None:
    """``TlsConfig`` from ``tls_ca``/``tls_cert``/``tls_key`` settings (None
    when none is given). Raises ``click.UsageError`` when only some are,
    ``TlsError`` for unusable files."""
    given = {key: settings.get(key) for key in TLS_KEYS}
    if not any(given.values()):
        return None
    missing = [f"--{key.replace('_', '-')}" for key, value in given.items() if not value]
    if missing:
        raise click.UsageError(f"TLS needs {', '.join(missing)} too (or none of the --tls-* options: a plaintext client, or a --plaintext node)")
    return TlsConfig(str(given["tls_ca"]), str(given["tls_cert"]), str(given["tls_key"]))


def listener_tls(settings: dict[str, Any], *, config_file: bool) -> TlsConfig | None:
    """The ``TlsConfig`` of a process that listens, from its ``tls_*`` and
    ``plaintext`` settings; None when plaintext was chosen. ``config_file``:
    the command takes a ``--config`` file (its keys are named too).

    Raises ``CommandError`` (a usage error, in one sentence) when neither
    TLS nor plaintext was chosen, ``click.UsageError`` for both or for an
    incomplete TLS setting, ``TlsError`` for files that cannot be used."""
    plaintext = settings.get("plaintext", False)
    if type(plaintext) is not bool:
        raise click.UsageError(f"plaintext must be true or false, got {plaintext!r}")
    tls = tls_from_settings(settings)
    if tls is not None and plaintext:
        raise click.UsageError("--plaintext and --tls-* exclude each other: give one")
    if tls is None and not plaintext:
        in_file = " (in --config: tls_ca, tls_cert and tls_key, or plaintext = true)" if config_file else ""
        raise CommandError(
            "no TLS chosen: give --tls-ca, --tls-cert and --tls-key (`kraft-quorum certs` makes them), "
            f"or --plaintext to run without TLS{in_file}.",
            exit_code=EXIT_USAGE,
        )
    return tls


def with_client_tls(command: Callable[..., Any]) -> Callable[..., Any]:
    """``tls_client_options``, handed to ``command`` as one ``tls`` keyword
    (a ``TlsConfig`` or None) instead of the four options."""

    @functools.wraps(command)
    def run(*args: Any, tls_ca: str | None, tls_cert: str | None, tls_key: str | None, command_config: str | None, **kwargs: Any) -> Any:
        return command(*args, tls=client_tls(tls_ca, tls_cert, tls_key, command_config), **kwargs)

    return tls_client_options(run)
