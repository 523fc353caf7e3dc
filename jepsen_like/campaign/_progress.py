"""What a campaign shows while it runs: on a terminal a live panel (rich),
elsewhere a plain line every few seconds, so that CI logs stay readable.

Both show the phase, elapsed and remaining time, ops/s, ok / fail / info,
the faults in force, the controller leader and its epoch, and the brokers'
states as the active controller sees them.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

import trio

if TYPE_CHECKING:
    from ._runner import Campaign


def snapshot(campaign: Campaign) -> dict[str, object]:
    """The figures both displays show, read from the campaign as it runs."""
    now = trio.current_time()
    history = campaign.history
    counts = dict(history.counts) if history is not None else {}
    elapsed = remaining = None
    if campaign.started_s is not None and campaign.deadline_s is not None:
        elapsed = max(0.0, now - campaign.started_s)
        remaining = max(0.0, campaign.deadline_s - now)
    brokers = " ".join(f"{broker_id}:{state.lower()}" for broker_id, (state, _) in sorted(campaign.broker_view.items()))
    return {
        "phase": campaign.phase,
        "elapsed_s": elapsed,
        "remaining_s": remaining,
        "ops_per_s": history.ops_per_second() if history is not None else 0.0,
        "ok": counts.get("ok", 0),
        "fail": counts.get("fail", 0),
        "info": counts.get("info", 0),
        "faults_now": list(campaign.active_faults.values()),
        "faults_total": campaign.faults_injected,
        "leader": campaign.view.leader,
        "epoch": campaign.view.epoch,
        "brokers": brokers,
        # With dynamic voters (the membership scenario): the voter set the
        # leader reports, "" when it did not answer; None otherwise.
        "voters": (
            ",".join(str(node) for node in sorted(campaign.view.voters or ())) if campaign.settings.dynamic_voters else None
        ),
    }


#: From this length on, times show as h:mm:ss (a 2-hour run's 5400 s reads badly).
CLOCK_FROM_S = 600.0


def elapsed_of_total(elapsed_s: float, total_s: float) -> str:
    """``12/60 s`` for a short run, ``1:30:00/2:00:00 (75%)`` for a long one."""
    if total_s < CLOCK_FROM_S:
        return f"{elapsed_s:4.0f}/{total_s:.0f} s"
    percent = 100 * elapsed_s / total_s if total_s else 100.0
    return f"{_clock(elapsed_s)}/{_clock(total_s)} ({percent:.0f}%)"


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def plain_line(figures: dict[str, object]) -> str:
    """One line for logs: ``[campaign] running chaos  12/60 s  240 ops/s ...``."""
    elapsed, remaining = figures["elapsed_s"], figures["remaining_s"]
    timing = ""
    if isinstance(elapsed, float) and isinstance(remaining, float):
        timing = f"  {elapsed_of_total(elapsed, elapsed + remaining)}"
    leader = figures["leader"]
    leader_text = f"leader {leader} e{figures['epoch']}" if leader is not None else "no leader"
    faults = ", ".join(figures["faults_now"]) or "none"  # type: ignore[arg-type]
    brokers = f"  brokers {figures['brokers']}" if figures["brokers"] else ""
    if figures.get("voters") is not None:
        leader_text += f" voters {figures['voters'] or '?'}"
    return (
        f"[campaign] {figures['phase']}{timing}  {figures['ops_per_s']:5.0f} ops/s  "
        f"ok {figures['ok']} fail {figures['fail']} info {figures['info']}  "
        f"faults now: {faults} ({figures['faults_total']} so far)  {leader_text}{brokers}"
    )


class PlainProgress:
    """A line every ``interval_s`` while the workload runs, and one per
    phase change before and after."""

    def __init__(self, out: TextIO = sys.stdout, interval_s: float = 5.0) -> None:
        self.out = out
        self.interval_s = interval_s

    def status(self, line: str) -> None:
        print(f"[campaign] {line}", file=self.out, flush=True)

    async def run(self, campaign: Campaign) -> None:
        while True:
            await trio.sleep(self.interval_s)
            if campaign.started_s is not None and campaign.phase.startswith("running"):
                print(plain_line(snapshot(campaign)), file=self.out, flush=True)


class LiveProgress:
    """A rich panel, redrawn four times a second, on a terminal."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console()
        self.events: list[str] = []
        self._live = None

    def status(self, line: str) -> None:
        self.events.append(line)
        del self.events[:-6]

    def _render(self, campaign: Campaign) -> object:
        from rich.panel import Panel
        from rich.table import Table

        figures = snapshot(campaign)
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", justify="right")
        table.add_column()
        elapsed, remaining = figures["elapsed_s"], figures["remaining_s"]
        if isinstance(elapsed, float) and isinstance(remaining, float):
            table.add_row("time", f"{elapsed_of_total(elapsed, elapsed + remaining)} elapsed")
        table.add_row("phase", str(figures["phase"]))
        table.add_row("throughput", f"{figures['ops_per_s']:.0f} ops/s")
        table.add_row(
            "operations",
            f"[green]ok {figures['ok']}[/]  [red]fail {figures['fail']}[/]  [yellow]info {figures['info']}[/]",
        )
        leader = figures["leader"]
        table.add_row("leader", f"node {leader}, epoch {figures['epoch']}" if leader is not None else "[red]none known[/]")
        if figures.get("voters") is not None:
            table.add_row("voters", str(figures["voters"]) or "[red]not known[/]")
        if figures["brokers"]:
            table.add_row("brokers", str(figures["brokers"]))
        faults = ", ".join(figures["faults_now"]) or "none"  # type: ignore[arg-type]
        table.add_row("faults now", f"[magenta]{faults}[/]  ({figures['faults_total']} so far)")
        if self.events:
            table.add_row("recent", "\n".join(self.events[-4:]))
        return Panel(table, title=f"jepsen-like campaign: {campaign.options.scenario}", expand=False)

    async def run(self, campaign: Campaign) -> None:
        from rich.live import Live

        with Live(self._render(campaign), console=self.console, refresh_per_second=4, transient=False) as live:
            while True:
                live.update(self._render(campaign))
                await trio.sleep(0.25)


__all__ = ["LiveProgress", "PlainProgress", "elapsed_of_total", "plain_line", "snapshot"]
