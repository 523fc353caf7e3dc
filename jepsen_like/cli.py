"""The ``jepsen-like`` command.

Subcommands are loaded lazily, by name, so that ``jepsen-like check`` loads
only the checker (and ``quorum.cli_errors``, which reports errors the way
every pykraft command does and loads only the quorum's sans-IO core): the
checker must not import the system it checks.
"""

from __future__ import annotations

import importlib

import click

from quorum.cli_errors import ReportingGroup

# name -> "module:attribute" of a click command
_SUBCOMMANDS: dict[str, str] = {
    "sim": "jepsen_like.sim.cli:sim_command",
    "sweep": "jepsen_like.sim.cli:sweep_command",
    "check": "jepsen_like.checker.cli:check_command",
    "synth": "jepsen_like.checker.cli:synth_command",
    "campaign": "jepsen_like.campaign.cli:campaign_command",
}


class _LazyGroup(ReportingGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise click.ClickException(f"'{cmd_name}' is not available: {error}") from error
        return getattr(module, attribute)


@click.group(cls=_LazyGroup)
def main() -> None:
    """Fault injection, simulation and history checking for pykraft."""
