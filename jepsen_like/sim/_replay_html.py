"""``replay.html``: one self-contained page replaying a simulated run.

Written by ``jepsen-like sim --html PATH`` from the run's ``Recording``
(``_recorder.py``). Inline CSS, inline SVG and vanilla JS; nothing is
fetched, so the file opens offline.

The page has four parts, all sharing one clock (virtual ms):

- the header: scenario, seed, options, verdict and the run's key moments
  (faults, elections, resignations, two leaders at once, stale reads), each
  a link that moves the clock there;
- the overview, drawn here in Python: a lane per node coloured by role with
  epoch labels, crashed periods hatched, faults shaded, client operations
  below each lane (stale reads in red), every message as a thin line from
  sender to receiver, a band where two nodes lead at once, and a cursor;
- the close-up, drawn by the script around the clock: the same lanes over a
  short window with each message as an arrow (dropped ones end in a cross);
- each node's log at the clock, drawn by the script: one box per record,
  coloured by epoch, solid when committed (below the node's high
  watermark), dashed when not.

A slider, step buttons (previous / next event, previous / next key moment)
and the arrow keys move the clock; checkboxes filter messages by type.
Long runs stay usable: the page carries at most ``MAX_MESSAGES`` messages,
thinning the Fetch traffic first, and says so.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from jepsen_like.report import ROLE_STYLE, TWO_LEADERS, concurrent_leaders, esc, linear_ticks, num, script_json, tick_label

from ._recorder import Recording
from ._result import ScenarioResult
from ._reads import find_stale_reads

# At most this many message copies go into the page; past it, Fetch and
# FetchResp (the bulk of any run) are thinned evenly, everything else kept.
MAX_MESSAGES = 6000
THINNED_TYPES = ("Fetch", "FetchResp")

# ---------------------------------------------------------------- layout (overview)
WIDTH = 1320
LEFT = 120
RIGHT = 16
PLOT_W = WIDTH - LEFT - RIGHT
TOP = 8
FAULT_ROW_H = 20
LEADERS_ROW_H = 18
LANE_H = 50
BAND_H = 24
OPS_H = 14
AXIS_H = 24

TYPE_COLOURS = {
    "Vote": "#ea580c",
    "VoteResp": "#fb923c",
    "BeginEpoch": "#7c3aed",
    "BeginEpochResp": "#a78bfa",
    "EndEpoch": "#b45309",
    "EndEpochResp": "#d6a35c",
    "Fetch": "#15803d",
    "FetchResp": "#2563eb",
    "FetchSnap": "#0f766e",
    "FetchSnapResp": "#2dd4bf",
}
OTHER_TYPE = "#64748b"
TYPE_ORDER = list(TYPE_COLOURS)
OP_COLOURS = {"ok": "#2563eb", "fail": "#94a3b8", "info": "#d97706", "stale": "#dc2626"}
EPOCH_COLOURS = ["#1d4ed8", "#0d9488", "#9333ea", "#c2410c", "#be185d", "#4d7c0f", "#0369a1", "#a16207"]
FAULT_PREFIXES = ("PARTITION", "FLAP", "NEMESIS", "HEAL")


# =========================================================================
# Entry points
# =========================================================================


def write_replay(result: ScenarioResult, out: str | Path, command: str | None = None) -> Path:
    """Write the replay page of a finished run and return its path.

    The run must have been made with ``SimOptions.recorder`` set to a
    ``Recording``. Raises ``ValueError`` when it was not, ``OSError`` when
    the file cannot be written.
    """
    page = render_replay(result, command=command)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(out)
    return out


def render_replay(result: ScenarioResult, command: str | None = None) -> str:
    """The page as a string (see the module docstring). Raises
    ``ValueError`` when the run was not recorded."""
    data = replay_data(result, command=command)
    title = f"{result.scenario} · seed {result.seed}"
    body = [_header(data), _overview_section(data), _closeup_section(data), _logs_section(data), _events_section(data)]
    type_css = "".join(
        f"body.hide-t-{t} .t-{t}{{display:none}}.t-{t}{{stroke:{TYPE_COLOURS.get(t, OTHER_TYPE)}}}"
        for t in data["types"]
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{esc(title)} — pykraft simulator replay</title>\n<style>{CSS}{type_css}</style>\n</head>\n"
        "<body>\n<main>\n" + "\n".join(body) + "\n</main>\n"
        f"<script type=\"application/json\" id=\"replay-data\">{script_json(data)}</script>\n"
        f"<script>{JS}</script>\n</body>\n</html>\n"
    )


# =========================================================================
# The data: the recording turned into what the page draws
# =========================================================================


def replay_data(result: ScenarioResult, command: str | None = None) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready values (times in ms)."""
    sim = result.simulation
    recording = getattr(getattr(sim, "options", None), "recorder", None)
    if not isinstance(recording, Recording):
        raise ValueError("the run was not recorded: set SimOptions.recorder = Recording() before running it")
    nodes = sorted(recording.nodes)
    end_ms = round(sim.now_us / 1000, 3)
    segments = _role_segments(recording, nodes, sim.now_us)
    bound_ms = sim.options.check_quorum_factor * sim.options.fetch_timeout_ms
    # The same call as run_scenario's, so the page marks exactly the reads
    # the verdict counted.
    stale = find_stale_reads(recording.client_events, bound_ms, getattr(sim.options, "staleness_bound_ms", None))
    stale_processes = {s["process"] for s in stale}
    ops = _operations(recording.client_events, stale_processes)
    messages, type_counts, thinned = _messages(recording)
    faults = _fault_windows(recording, nodes, sim.now_us)
    lossy = _lossy_windows(recording, sim.now_us)
    down = _down_windows(recording, sim.now_us)
    leaders = _concurrent_leaders(segments, nodes)
    story = [[_ms(t), line, _story_kind(line, stale_processes)] for t, line in recording.story]
    data: dict[str, Any] = {
        "scenario": result.scenario,
        "seed": result.seed,
        "options": result.options,
        "valid": result.valid,
        "failure_class": result.failure_class,
        "violation": (result.violation or "").splitlines()[0] if result.violation else None,
        "stale_reads": result.stale_reads,
        "leader_resign_ms": result.leader_resign_ms,
        "failover_ms": result.failover_ms,
        "ops_count": result.ops,
        "events": result.events,
        "extra": {k: v for k, v in result.extra.items() if isinstance(v, (int, float, str, bool)) or v is None},
        "command": command,
        "nodes": nodes,
        "end_ms": end_ms,
        "segments": segments,
        "messages": messages,
        "types": [t for t in TYPE_ORDER if t in type_counts] + sorted(t for t in type_counts if t not in TYPE_ORDER),
        "type_counts": dict(type_counts),
        "messages_total": len(recording.messages),
        "messages_thinned": thinned,
        "logs": {str(node): [[_ms(op[0]), *op[1:]] for op in recording.logs.get(node, [])] for node in nodes},
        "faults": faults,
        "lossy": lossy,
        "down": down,
        "leaders": leaders,
        "ops": ops,
        "stale": stale,
        "story": story,
    }
    data["moments"] = _key_moments(data, recording)
    data["start_ms"] = _initial_time(data)
    return data


def _ms(time_us: int) -> float:
    return round(time_us / 1000, 3)


def _role_segments(recording: Recording, nodes: list[int], end_us: int) -> dict[str, list[list[Any]]]:
    """Per node: [start_ms, end_ms, role, epoch, leader, reason]; role
    "down" while the process is crashed. Several changes at one instant
    give zero-length segments, kept for the log of events."""
    changes: dict[int, list[tuple[int, int, str, int | None, int | None, str]]] = defaultdict(list)
    for order, (time_us, node, what) in enumerate(recording.process):
        if what == "crash":
            changes[node].append((time_us, 0, "down", None, None, "crashed"))
    for time_us, node, role, epoch, leader, reason in recording.roles:
        changes[node].append((time_us, 1, role, epoch, leader, reason))
    result: dict[str, list[list[Any]]] = {}
    for node in nodes:
        rows: list[list[Any]] = []
        for time_us, _, role, epoch, leader, reason in sorted(changes[node], key=lambda c: (c[0], c[1])):
            if rows:
                rows[-1][1] = _ms(time_us)
            rows.append([_ms(time_us), _ms(end_us), role, epoch, leader, reason])
        result[str(node)] = rows
    return result


def _messages(recording: Recording) -> tuple[list[list[Any]], Counter[str], bool]:
    """[send_ms, arrive_ms | None, src, dst, type, epoch, outcome, text]."""
    rows = recording.messages
    counts = Counter(row[4] for row in rows)
    keep = [True] * len(rows)
    thinned = False
    if len(rows) > MAX_MESSAGES:
        bulk = [i for i, row in enumerate(rows) if row[4] in THINNED_TYPES]
        budget = max(0, MAX_MESSAGES - (len(rows) - len(bulk)))
        if len(bulk) > budget:
            thinned = True
            chosen = {bulk[int(k * len(bulk) / budget)] for k in range(budget)} if budget else set()
            for i in bulk:
                keep[i] = i in chosen
    out = []
    for i, row in enumerate(rows):
        if keep[i]:
            send_us, arrive_us, src, dst, kind, epoch, outcome, text = row
            out.append([_ms(send_us), None if arrive_us is None else _ms(arrive_us), src, dst, kind, epoch, outcome, text])
    return out, counts, thinned


def _link_groups(links: tuple[tuple[int, int], ...], nodes: list[int]) -> list[list[int]]:
    """The groups of nodes that can still talk (links cut both ways split them)."""
    blocked = set(links)
    both = {(a, b) for a, b in blocked if (b, a) in blocked}
    # Groups: nodes connected by links not cut both ways.
    groups: list[list[int]] = []
    seen: set[int] = set()
    for start in nodes:
        if start in seen:
            continue
        group, frontier = [], [start]
        seen.add(start)
        while frontier:
            node = frontier.pop()
            group.append(node)
            for other in nodes:
                if other not in seen and (node, other) not in both:
                    seen.add(other)
                    frontier.append(other)
        groups.append(sorted(group))
    return groups


def _describe_links(links: tuple[tuple[int, int], ...], nodes: list[int]) -> str:
    """A partition shape in words: groups that cannot talk, then one-way cuts."""
    blocked = set(links)
    both = {(a, b) for a, b in blocked if (b, a) in blocked}
    groups = _link_groups(links, nodes)
    parts = []
    if len(groups) > 1:
        parts.append(" | ".join(" ".join(f"n{n}" for n in group) for group in groups))
    one_way = sorted((a, b) for a, b in blocked if (a, b) not in both)
    parts.extend(f"n{a}→n{b} cut" for a, b in one_way)
    return "; ".join(parts) if parts else "links cut"


def _fault_windows(recording: Recording, nodes: list[int], end_us: int) -> list[dict[str, Any]]:
    """Periods with blocked links: start, end, shape, label, nodes touched."""
    windows = []
    story_at: dict[int, str] = {}
    for time_us, line in recording.story:
        if line.startswith(FAULT_PREFIXES) and not line.startswith("HEAL"):
            story_at[time_us] = line
    changes = recording.blocked
    for i, (time_us, links) in enumerate(changes):
        if not links:
            continue
        until_us = changes[i + 1][0] if i + 1 < len(changes) else end_us
        groups = _link_groups(links, nodes)
        # Shaded strongly: the nodes on a side without a majority (cut off
        # from the quorum); lightly: the ends of one-way cuts.
        cut_off = sorted(n for group in groups if len(groups) > 1 and 2 * len(group) <= len(nodes) for n in group)
        one_way = sorted({n for a, b in links if (b, a) not in links for n in (a, b)} - set(cut_off))
        shape = _describe_links(links, nodes)
        windows.append(
            {
                "start": _ms(time_us),
                "end": _ms(until_us),
                "shape": shape,
                "label": _fault_label(story_at.get(time_us), shape),
                "cut_off": cut_off,
                "one_way": one_way,
            }
        )
    return windows


def _fault_label(story: str | None, shape: str) -> str:
    """The trace's line for the fault, with the shape when it names no node."""
    if story is None:
        return shape
    return story if re.search(r"\bn\d", story) else f"{story}: {shape}"


def _lossy_windows(recording: Recording, end_us: int) -> list[list[Any]]:
    windows = []
    for i, (time_us, rates) in enumerate(recording.lossy):
        if not any(rates.values()):
            continue
        until_us = recording.lossy[i + 1][0] if i + 1 < len(recording.lossy) else end_us
        text = ", ".join(f"{name.replace('_rate', '')} {value:.0%}" for name, value in rates.items() if value)
        windows.append([_ms(time_us), _ms(until_us), f"lossy links: {text}"])
    return windows


def _down_windows(recording: Recording, end_us: int) -> list[list[Any]]:
    """[node, crash_ms, restart_ms]."""
    crashed: dict[int, int] = {}
    windows = []
    for time_us, node, what in recording.process:
        if what == "crash":
            crashed[node] = time_us
        elif node in crashed:
            windows.append([node, _ms(crashed.pop(node)), _ms(time_us)])
    for node, time_us in sorted(crashed.items()):
        windows.append([node, _ms(time_us), _ms(end_us)])
    return windows


def _concurrent_leaders(segments: dict[str, list[list[Any]]], nodes: list[int]) -> list[list[Any]]:
    """Periods in which two or more nodes believe they lead (each in its own
    epoch: Raft allows that; the older one is a zombie until it learns), as
    [start_ms, end_ms, [[node, epoch], ...]]."""
    spans = [
        (node, start, end, epoch)
        for node in nodes
        for start, end, role, epoch, _, _ in segments[str(node)]
        if role == "leader"
    ]
    return [[start, end, [[n, e] for n, e in leaders]] for start, end, leaders in concurrent_leaders(spans)]


def _operations(events: list[dict[str, Any]], stale_processes: set[int]) -> list[list[Any]]:
    """[invoke_ms, done_ms, process, f, key, value, node, mode, type, error, offset, stale]."""
    invoked: dict[int, dict[str, Any]] = {}
    ops = []
    for event in events:
        if event["type"] == "invoke":
            invoked[event["process"]] = event
            continue
        start = invoked.pop(event["process"], None)
        if start is None:
            continue
        ops.append(
            [
                round(start["time"] / 1e6, 3),
                round(event["time"] / 1e6, 3),
                event["process"],
                event["f"],
                event.get("key"),
                event.get("value"),
                event.get("node"),
                start.get("mode"),
                event["type"],
                event.get("error"),
                event.get("offset"),
                event["type"] == "ok" and event["f"] == "read" and event["process"] in stale_processes,
            ]
        )
    return ops


def _story_kind(line: str, stale_processes: set[int]) -> str:
    """How the events list styles a trace line."""
    if line.startswith(FAULT_PREFIXES) or " CRASH" in line or " RESTART" in line:
        return "fault"
    if line.startswith("client "):
        process = line.split()[1]
        if process.startswith("p") and process[1:].isdigit() and int(process[1:]) in stale_processes and ": ok " in line:
            return "stale"
        return "client"
    if " leader e" in line or " resigned e" in line:
        return "leadership"
    return "role"


def _key_moments(data: dict[str, Any], recording: Recording) -> list[list[Any]]:
    """[time_ms, kind, text]: what to look at, in time order."""
    moments: list[tuple[float, int, str, str]] = []
    for window in data["faults"]:
        moments.append((window["start"], 0, "fault", window["label"]))
    for time_us, line in recording.story:
        if line.startswith("HEAL"):
            moments.append((_ms(time_us), 0, "heal", line))
    for node, crash_ms, restart_ms in data["down"]:
        moments.append((crash_ms, 0, "fault", f"n{node} crashed"))
        if restart_ms < data["end_ms"]:
            moments.append((restart_ms, 0, "heal", f"n{node} restarted"))
    for time_us, node, role, epoch, _, reason in recording.roles:
        if role == "leader":
            moments.append((_ms(time_us), 1, "leader", f"n{node} leads epoch {epoch}"))
        elif role == "resigned":
            moments.append((_ms(time_us), 1, "resigned", f"n{node} resigned epoch {epoch}: {reason}"))
    for start, end, pair in data["leaders"]:
        names = " and ".join(f"n{n} (e{e})" for n, e in pair)
        moments.append((start, 2, "two-leaders", f"two leaders for {end - start:.0f} ms: {names}"))
    stale_ops = [op for op in data["ops"] if op[11]]
    by_node: dict[Any, list[list[Any]]] = defaultdict(list)
    for op in stale_ops:
        by_node[op[6]].append(op)
    for node, rows in sorted(by_node.items(), key=lambda item: item[1][0][1]):
        first, last = rows[0], rows[-1]
        modes = sorted({op[7] for op in rows if op[7]})
        moments.append(
            (
                first[1],
                3,
                "stale",
                f"first of {len(rows)} stale reads via n{node} ({', '.join(modes)}), the last at {last[1]:.0f} ms",
            )
        )
    moments.sort(key=lambda m: (m[0], m[1]))
    return [[time, kind, text] for time, _, kind, text in moments]


def _initial_time(data: dict[str, Any]) -> float:
    """Where the clock starts: the first stale read, else the first
    resignation, else the first fault, else the first leader."""
    for kind in ("stale", "resigned", "two-leaders", "fault", "leader"):
        for time, moment_kind, _ in data["moments"]:
            if moment_kind == kind:
                return time
    return 0.0


# =========================================================================
# Header
# =========================================================================


def _header(data: dict[str, Any]) -> str:
    valid = data["valid"]
    word, css = ("VALID", "verdict-valid") if valid else ("INVALID", "verdict-invalid")
    line = "no invariant broken, every read within its contract, progress after healing"
    if not valid:
        line = f"{data['failure_class']}: {data['violation']}"
    ops = data["ops_count"]
    facts = [
        ("stale reads", data["stale_reads"], "bad" if data["stale_reads"] else ""),
        ("leader resigned after", _ms_text(data["leader_resign_ms"]), ""),
        ("failover", _ms_text(data["failover_ms"]), ""),
        ("ops ok / fail / info", f"{ops.get('ok', 0)} / {ops.get('fail', 0)} / {ops.get('info', 0)}", ""),
        ("messages", f"{data['messages_total']:,}", ""),
        ("virtual time", f"{data['end_ms'] / 1000:.1f} s", ""),
    ]
    fact_html = "".join(
        f'<div class="fact {cls}"><div class="fact-v">{esc(v)}</div><div class="fact-k">{esc(k)}</div></div>'
        for k, v, cls in facts
    )
    options = data["options"]
    chips = []
    for key in sorted(options):
        value = options[key]
        css_opt = "opt key-opt" if key in ("check_quorum", "pre_vote") else "opt"
        if key in ("check_quorum", "pre_vote") and value is False:
            css_opt += " off"
        chips.append(f'<span class="{css_opt}"><b>{esc(key)}</b> {esc(value)}</span>')
    command = data["command"]
    command_html = f'<div class="cmd">replay: <code>{esc(command)}</code></div>' if command else ""
    moments = "".join(
        f'<li class="m-{esc(kind)}"><a href="#" class="moment" data-t="{time}"><span class="m-t">{time:.0f} ms</span> '
        f"{esc(text)}</a></li>"
        for time, kind, text in data["moments"]
    ) or '<li class="muted">nothing of note</li>'
    return f"""<header class="card {css}">
<div class="head-row">
<div><div class="kicker">pykraft simulator replay</div><h1>{esc(data['scenario'])} <span class="seed">seed {esc(data['seed'])}</span></h1>
<div class="opts">{''.join(chips)}</div>{command_html}</div>
<div class="verdict"><div class="verdict-word">{word}</div><div class="verdict-line">{esc(line)}</div></div>
</div>
<div class="facts">{fact_html}</div>
<h2>Key moments</h2>
<p class="lede">Click one to move the clock there; <kbd>Shift</kbd>+<kbd>←</kbd>/<kbd>→</kbd> step through them.</p>
<ol class="moments">{moments}</ol>
</header>"""


def _ms_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


# =========================================================================
# Overview (static SVG)
# =========================================================================


class _Scale:
    def __init__(self, end_ms: float) -> None:
        self.end_ms = max(end_ms, 1.0)

    def x(self, ms: float) -> float:
        return LEFT + min(max(ms, 0.0), self.end_ms) / self.end_ms * PLOT_W


def _overview_section(data: dict[str, Any]) -> str:
    nodes = data["nodes"]
    scale = _Scale(data["end_ms"])
    lanes_top = TOP + FAULT_ROW_H + LEADERS_ROW_H
    height = lanes_top + LANE_H * len(nodes) + AXIS_H
    lane_y = {node: lanes_top + i * LANE_H for i, node in enumerate(nodes)}
    parts: list[str] = [
        f'<svg class="chart overview" viewBox="0 0 {WIDTH} {height}" data-left="{LEFT}" data-width="{PLOT_W}" '
        f'data-end="{data["end_ms"]}" role="img" aria-label="the whole run: roles, faults, messages, client operations">'
    ]
    parts.append(_overview_defs())
    # time grid
    for tick in linear_ticks(0, data["end_ms"], max(4, PLOT_W // 90)):
        x = scale.x(tick)
        parts.append(f'<line class="grid" x1="{num(x)}" x2="{num(x)}" y1="{lanes_top}" y2="{height - AXIS_H}"/>')
        parts.append(f'<text class="tick" x="{num(x)}" y="{height - 8}" text-anchor="middle">{tick_label(tick / 1000)} s</text>')
    # fault row and shading
    parts.append(f'<text class="row-label" x="{LEFT - 8}" y="{TOP + 14}" text-anchor="end">network</text>')
    for window in data["faults"]:
        x0, x1 = scale.x(window["start"]), scale.x(window["end"])
        w = max(x1 - x0, 1.5)
        parts.append(
            f'<g class="fault"><title>{esc(window["label"])} ({window["start"]:.0f}–{window["end"]:.0f} ms)</title>'
            f'<rect class="fault-bar" x="{num(x0)}" y="{TOP + 2}" width="{num(w)}" height="{FAULT_ROW_H - 5}" rx="3"/>'
        )
        if w > 60:
            parts.append(
                f'<text class="fault-text" x="{num(x0 + 5)}" y="{TOP + 14}">{esc(_clip(window["label"], int(w / 6.4)))}</text>'
            )
        parts.append("</g>")
        for node, strength in [(n, " strong") for n in window["cut_off"]] + [(n, "") for n in window["one_way"]]:
            parts.append(
                f'<rect class="fault-shade{strength}" x="{num(x0)}" y="{lane_y[node]}" width="{num(w)}" height="{LANE_H - 4}"/>'
            )
    for start, end, label in data["lossy"]:
        x0, x1 = scale.x(start), scale.x(end)
        parts.append(
            f'<rect class="lossy-bar" x="{num(x0)}" y="{TOP + FAULT_ROW_H - 5}" width="{num(max(x1 - x0, 1.5))}" height="3">'
            f"<title>{esc(label)}</title></rect>"
        )
    # two leaders at once
    parts.append(f'<text class="row-label" x="{LEFT - 8}" y="{TOP + FAULT_ROW_H + 12}" text-anchor="end">leaders</text>')
    for start, end, pair in data["leaders"]:
        x0, x1 = scale.x(start), scale.x(end)
        names = " + ".join(f"n{n} e{e}" for n, e in pair)
        parts.append(
            f'<g class="two-leaders"><title>two leaders {start:.0f}–{end:.0f} ms: {esc(names)}</title>'
            f'<rect x="{num(x0)}" y="{TOP + FAULT_ROW_H + 1}" width="{num(max(x1 - x0, 1.5))}" height="{LEADERS_ROW_H - 5}" rx="3"/>'
        )
        label = f"2 leaders: {names}" if x1 - x0 > 150 else ("2 leaders" if x1 - x0 > 56 else "")
        if label:
            parts.append(f'<text x="{num(x0 + 5)}" y="{TOP + FAULT_ROW_H + 11}">{esc(label)}</text>')
        parts.append("</g>")
    # lanes
    for node in nodes:
        parts.append(_overview_lane(node, lane_y[node], data, scale))
    # messages, under the cursor, over the lanes
    parts.append('<g class="msgs">')
    for send, arrive, src, dst, kind, epoch, outcome, text in data["messages"]:
        if arrive is None or outcome in ("refused", "partitioned", "lost"):
            continue
        y0 = lane_y[src] + BAND_H / 2 if src in lane_y else None
        y1 = lane_y[dst] + BAND_H / 2 if dst in lane_y else None
        if y0 is None or y1 is None:
            continue
        parts.append(
            f'<line class="msg t-{esc(kind)}" x1="{num(scale.x(send))}" y1="{num(y0)}" x2="{num(scale.x(arrive))}" y2="{num(y1)}"/>'
        )
    parts.append("</g>")
    # stale read markers go on top of everything
    for op in data["ops"]:
        if op[11] and op[6] in lane_y:
            x = scale.x(op[1])
            y = lane_y[op[6]] + BAND_H + OPS_H / 2 + 1
            parts.append(
                f'<circle class="stale-mark" cx="{num(x)}" cy="{num(y)}" r="4.2"><title>stale read p{op[2]} via n{op[6]} '
                f"({esc(op[7])}) returned {esc(op[5])} at {op[1]:.1f} ms</title></circle>"
            )
    parts.append(
        f'<line id="ov-cursor" class="cursor" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{height - AXIS_H}"/>'
        f'<rect id="ov-window" class="window" x="{LEFT}" y="{lanes_top - 2}" width="0" height="{LANE_H * len(nodes)}"/>'
    )
    parts.append("</svg>")
    legend = _legend(data)
    note = ""
    if data["messages_thinned"]:
        note = (
            f'<p class="note">Long run: the page carries {len(data["messages"]):,} of {data["messages_total"]:,} messages. '
            f'Every one but Fetch/FetchResp is kept; those are thinned evenly.</p>'
        )
    return f"""<section class="card" id="overview">
<h2>The whole run</h2>
<p class="lede">One lane per node, coloured by role with its epoch; hatched while the process is down; red shading
while the network cuts the node off. Thin lines are delivered messages. Below each lane: client operations
answered by that node (<span class="c-stale">● stale read</span>). Click anywhere to move the clock.</p>
{legend}{note}
<div class="scroll">{''.join(parts)}</div>
</section>"""


def _overview_defs() -> str:
    return (
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#cbd5e1"/><line x1="0" y1="0" x2="0" y2="6" stroke="#475569" stroke-width="3"/>'
        "</pattern></defs>"
    )


def _overview_lane(node: int, y: float, data: dict[str, Any], scale: _Scale) -> str:
    parts = [f'<g class="lane" data-node="{node}">']
    parts.append(f'<rect class="lane-bg" x="{LEFT}" y="{y}" width="{PLOT_W}" height="{LANE_H - 4}"/>')
    parts.append(f'<text class="lane-label" x="{LEFT - 10}" y="{num(y + 17)}" text-anchor="end">n{node}</text>')
    parts.append(f'<text class="lane-sub" x="{LEFT - 10}" y="{num(y + 31)}" text-anchor="end">ops ▸</text>')
    for start, end, role, epoch, leader, reason in data["segments"][str(node)]:
        if end <= start:
            continue
        x0, x1 = scale.x(start), scale.x(end)
        w = max(x1 - x0, 0.6)
        if role == "down":
            parts.append(
                f'<rect class="down" x="{num(x0)}" y="{y + 2}" width="{num(w)}" height="{BAND_H - 4}" fill="url(#hatch)">'
                f"<title>n{node} down {start:.0f}–{end:.0f} ms</title></rect>"
            )
            continue
        fill, text_colour, inset, short = ROLE_STYLE.get(role, ("#cbd5e1", "#1f2937", 7, "?"))
        title = f"n{node} {role} e{epoch}" + (f" leader=n{leader}" if leader is not None else "") + f" {start:.1f}–{end:.1f} ms ({reason})"
        parts.append(
            f'<g class="seg role-{esc(role)}"><title>{esc(title)}</title>'
            f'<rect x="{num(x0)}" y="{num(y + inset / 2)}" width="{num(w)}" height="{num(BAND_H - inset)}" fill="{fill}"/>'
        )
        label = f"{role.capitalize()} e{epoch}" if w > 78 else (f"{short} e{epoch}" if w > 30 else (short if w > 11 else ""))
        # Long bands repeat their label, so the role is legible next to
        # whatever happens late in it (a zombie's stale reads, say).
        for offset in range(0, max(1, int(w) - 60), 360) if label else ():
            parts.append(
                f'<text class="role-text" x="{num(x0 + 4 + offset)}" y="{num(y + BAND_H / 2 + 4)}" fill="{text_colour}">{esc(label)}</text>'
            )
        parts.append("</g>")
        if role == "resigned":
            parts.append(
                f'<g class="resign-mark"><title>{esc(title)}</title><path d="M{num(x0)} {y + 1} l5 -7 h-10 z"/>'
                f'<line x1="{num(x0)}" x2="{num(x0)}" y1="{y + 1}" y2="{y + LANE_H - 5}"/></g>'
            )
    ops_y = y + BAND_H + 1
    for op in data["ops"]:
        if op[6] != node or op[11]:
            continue
        x = scale.x(op[1])
        colour = OP_COLOURS.get(op[8], OP_COLOURS["info"])
        if op[3] == "write":
            parts.append(f'<rect class="op op-{esc(op[8])}" x="{num(x - 1.5)}" y="{num(ops_y + 3)}" width="3" height="8" fill="{colour}"/>')
        else:
            parts.append(f'<circle class="op op-{esc(op[8])}" cx="{num(x)}" cy="{num(ops_y + OPS_H / 2)}" r="2.2" fill="{colour}"/>')
    parts.append("</g>")
    return "".join(parts)


def _legend(data: dict[str, Any]) -> str:
    roles = "".join(
        f'<span class="key"><i style="background:{fill}"></i>{esc(role)}</span>' for role, (fill, _, _, _) in ROLE_STYLE.items()
    )
    extras = (
        '<span class="key"><i class="k-down"></i>down</span>'
        '<span class="key"><i class="k-fault"></i>cut off</span>'
        '<span class="key"><i class="k-two"></i>two leaders</span>'
        '<span class="key"><i class="sq" style="background:#2563eb"></i>write ok</span>'
        '<span class="key"><i class="dot" style="background:#2563eb"></i>read ok</span>'
        '<span class="key"><i class="dot" style="background:#94a3b8"></i>fail</span>'
        '<span class="key"><i class="dot" style="background:#d97706"></i>info (timeout)</span>'
        '<span class="key"><i class="dot" style="background:#dc2626"></i>stale read</span>'
        '<span class="key"><i class="tri"></i>resigned</span>'
    )
    return f'<div class="legend">{roles}{extras}</div>'


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


# =========================================================================
# The parts the script draws
# =========================================================================


def _closeup_section(data: dict[str, Any]) -> str:
    boxes = "".join(
        f'<label class="toggle type-box"><input type="checkbox" data-type="{esc(t)}" checked>'
        f'<i style="background:{TYPE_COLOURS.get(t, OTHER_TYPE)}"></i>{esc(t)} <span class="muted">{data["type_counts"][t]}</span></label>'
        for t in data["types"]
    )
    windows = "".join(
        f'<option value="{w}"{" selected" if w == 200 else ""}>{_window_text(w)}</option>'
        for w in (20, 50, 200, 1000, 5000, 20000)
    )
    return f"""<section class="card" id="closeup">
<div class="controls">
<button type="button" id="b-first" title="start (Home)">« start</button>
<button type="button" id="b-prev-moment" title="previous key moment (Shift+←)">⇤ moment</button>
<button type="button" id="b-prev" title="previous event (←)">◀ event</button>
<button type="button" id="b-play" title="play / pause (space)">▶ play</button>
<button type="button" id="b-next" title="next event (→)">event ▶</button>
<button type="button" id="b-next-moment" title="next key moment (Shift+→)">moment ⇥</button>
<button type="button" id="b-last" title="end (End)">end »</button>
<span class="now">t = <b id="t-now">0</b> ms</span>
<label class="win">window <select id="window">{windows}</select></label>
</div>
<input type="range" id="slider" min="0" max="{data['end_ms']}" step="0.001" value="{data['start_ms']}" aria-label="time">
<div class="filters"><span class="muted">messages:</span>{boxes}
<label class="toggle"><input type="checkbox" id="show-dropped" checked><i class="k-drop"></i>dropped / refused</label></div>
<h2>Close-up <span class="muted small" id="closeup-range"></span></h2>
<p class="lede">The window around the clock (the dashed line): arrows go from sender at send time to receiver
at arrival; a red dashed arrow ending in × was dropped by a partition or a lossy link, or refused by a
dead process. Hover an arrow for the message.</p>
<div class="scroll"><svg class="chart closeup" id="closeup-svg" viewBox="0 0 {WIDTH} 100"></svg></div>
<div id="now-line" class="now-line"></div>
</section>"""


def _window_text(window_ms: int) -> str:
    return f"{window_ms // 1000} s" if window_ms >= 1000 else f"{window_ms} ms"


def _logs_section(data: dict[str, Any]) -> str:
    return """<section class="card" id="logs">
<h2>Logs at the clock</h2>
<p class="lede">One box per record, numbered by its epoch and coloured by it; ★ marks a leader's LEADER_CHANGE record.
<b>Solid</b>: committed (below that node's high watermark, the black bar). <b>Dashed</b>: not (yet) committed,
and may still be truncated. Hover a box for its offset and content.</p>
<div class="scroll"><svg class="chart logs" id="logs-svg" viewBox="0 0 1320 100"></svg></div>
</section>"""


def _events_section(data: dict[str, Any]) -> str:
    return """<section class="card" id="events">
<h2>Trace</h2>
<p class="lede">The simulator's story trace (<code>--trace story</code>); the line at the clock is marked. Faults in
red, leadership in blue, stale reads in bold red. Click a line to go there.</p>
<ol class="trace" id="trace"></ol>
</section>"""


# =========================================================================
# CSS and JS
# =========================================================================

CSS = """
*{box-sizing:border-box}
body{margin:0;background:#eef2f7;color:#0f172a;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1380px;margin:0 auto;padding:16px}
.card{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(15,23,42,.12);padding:16px 20px;margin-bottom:16px}
h1{margin:0;font-size:28px;letter-spacing:-.01em}h1 .seed{color:#64748b;font-weight:500}
h2{margin:10px 0 4px;font-size:18px}.small{font-size:12px;font-weight:400}
code,kbd{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace;font-size:12px}
kbd{border:1px solid #cbd5e1;border-bottom-width:2px;border-radius:4px;padding:0 4px;background:#f8fafc}
.muted{color:#64748b}.lede{margin:2px 0 8px;color:#475569;font-size:13px}
.note{margin:4px 0;color:#92400e;background:#fffbeb;border:1px solid #fde68a;border-radius:6px;padding:4px 8px;font-size:12px}
.kicker{text-transform:uppercase;font-size:11px;letter-spacing:.08em;color:#64748b}
header.card{border-top:8px solid #94a3b8}
.head-row{display:flex;justify-content:space-between;gap:24px;align-items:flex-start;flex-wrap:wrap}
.verdict{text-align:right;max-width:55%}
.verdict-word{font-size:44px;font-weight:800;line-height:1;letter-spacing:.02em}
.verdict-line{color:#475569;margin-top:4px}
.verdict-valid{border-top-color:#16a34a!important}.verdict-valid .verdict-word{color:#16a34a}
.verdict-invalid{border-top-color:#dc2626!important}.verdict-invalid .verdict-word{color:#dc2626}
.facts{display:flex;gap:10px;flex-wrap:wrap;margin:14px 0 6px}
.fact{background:#f8fafc;border:1px solid #e2e8f0;border-radius:8px;padding:6px 14px;min-width:92px}
.fact.bad{background:#fef2f2;border-color:#fca5a5}.fact.bad .fact-v{color:#dc2626}
.fact-v{font-size:20px;font-weight:700}.fact-k{font-size:11px;color:#64748b;text-transform:uppercase;letter-spacing:.05em}
.opts{margin-top:8px;max-width:760px}
.opt{display:inline-block;background:#f1f5f9;border-radius:4px;padding:1px 6px;margin:0 4px 4px 0;font-size:12px}
.opt b{color:#475569;font-weight:600}.opt.key-opt{background:#dcfce7}.opt.key-opt.off{background:#fee2e2;color:#991b1b;font-weight:600}
.cmd{margin-top:4px;font-size:12px;color:#475569}
.moments{margin:4px 0 0;padding:0;list-style:none;columns:2;column-gap:24px;font-size:13px}
.moments li{break-inside:avoid;padding:1px 0}
.moments a{color:#0f172a;text-decoration:none}.moments a:hover{text-decoration:underline}
.m-t{display:inline-block;min-width:74px;color:#64748b;font-variant-numeric:tabular-nums}
.m-fault a{color:#be123c}.m-heal a{color:#0f766e}.m-leader a{color:#1e3a8a;font-weight:600}
.m-resigned a{color:#57534e;font-weight:600}.m-two-leaders a{color:#86198f;font-weight:600}.m-stale a{color:#dc2626;font-weight:700}
.moments a.current{background:#fef9c3;border-radius:3px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:4px 0 8px;font-size:12px;color:#334155}
.key{display:inline-flex;align-items:center;gap:5px}
.key i,.type-box i{display:inline-block;width:14px;height:10px;border-radius:2px}
.key i.dot{width:9px;height:9px;border-radius:50%}.key i.sq{width:4px;height:10px;border-radius:0}
.key i.k-down{background:repeating-linear-gradient(45deg,#475569 0 3px,#cbd5e1 3px 6px)}
.key i.k-fault{background:rgba(225,29,72,.16);border:1px dashed #e11d48}
.key i.k-two{background:TWO_LEADERS}
.key i.tri{width:0;height:0;border-left:5px solid transparent;border-right:5px solid transparent;border-top:7px solid #57534e;border-radius:0}
i.k-drop{display:inline-block;width:14px;height:0;border-top:2px dashed #dc2626;vertical-align:middle}
.c-stale{color:#dc2626;font-weight:700}
.scroll{overflow-x:auto}
svg.chart{display:block;width:100%;height:auto;min-width:900px;font-family:system-ui,"DejaVu Sans",sans-serif}
.grid{stroke:#e2e8f0;stroke-width:1}.tick{font-size:11px;fill:#64748b}
.row-label{font-size:11px;fill:#64748b;text-transform:uppercase;letter-spacing:.05em}
.lane-bg{fill:#f8fafc;stroke:#e2e8f0}
.lane-label{font-size:14px;font-weight:700;fill:#0f172a}.lane-sub{font-size:10px;fill:#94a3b8}
.role-text{font-size:11px;pointer-events:none}.role-leader .role-text{font-weight:700}
.role-leader rect{stroke:#0b1b4d;stroke-width:.6}
.fault-bar{fill:#fecdd3;stroke:#e11d48;stroke-width:.8}.fault-text{font-size:11px;fill:#9f1239;font-weight:600}
.fault-shade{fill:#e11d48;fill-opacity:.08;pointer-events:none}.fault-shade.strong{fill-opacity:.16}
.lossy-bar{fill:#f59e0b}
.two-leaders rect{fill:TWO_LEADERS;stroke:#a21caf;stroke-width:.8}.two-leaders text{font-size:11px;fill:#701a75;font-weight:700}
.msg{stroke-width:.8;stroke-opacity:.5}
.stale-mark{fill:#dc2626;stroke:#fff;stroke-width:1.2}
.resign-mark path{fill:#292524}.resign-mark line{stroke:#292524;stroke-width:2}
.cursor{stroke:#0f172a;stroke-width:1.5;stroke-dasharray:5 3;pointer-events:none}
.window{fill:#fde047;fill-opacity:.18;stroke:#ca8a04;stroke-width:.8;pointer-events:none}
svg.overview{cursor:crosshair}
.controls{display:flex;flex-wrap:wrap;gap:6px;align-items:center}
.controls button{font:inherit;font-size:13px;background:#f1f5f9;border:1px solid #cbd5e1;border-radius:6px;padding:3px 10px;cursor:pointer}
.controls button:hover{background:#e2e8f0}
.now{margin-left:12px;font-variant-numeric:tabular-nums;font-size:15px}.win{margin-left:auto;font-size:13px}
#slider{width:100%;margin:10px 0 6px;accent-color:#1e3a8a}
.filters{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;align-items:center}
.toggle{cursor:pointer;user-select:none;display:inline-flex;align-items:center;gap:4px}
.now-line{font-size:12.5px;color:#334155;margin-top:6px;min-height:1.4em}
.cl-lane-label{font-size:13px;font-weight:700;fill:#0f172a}.cl-lane-sub{font-size:10.5px;fill:#475569}
.proc-line{stroke:#cbd5e1;stroke-width:1}
.arrow{stroke-width:1.4;fill:none}.arrow.resp{stroke-dasharray:4 2}
.arrow.dropped{stroke:#dc2626!important;stroke-dasharray:3 3;stroke-opacity:.9}
.arrow-label{font-size:10px;fill:#334155;paint-order:stroke;stroke:#fff;stroke-width:3px}
.drop-x{stroke:#dc2626;stroke-width:1.8}
.log-box{stroke-width:1.3}.log-box.uncommitted{fill:#fff!important;stroke-dasharray:3 2}
.log-text{font-size:11px;font-weight:700;text-anchor:middle;pointer-events:none}
.log-off{font-size:9.5px;fill:#94a3b8;text-anchor:middle}
.hw-bar{stroke:#0f172a;stroke-width:3}.hw-text{font-size:10px;fill:#0f172a;font-weight:700}
.trace{margin:0;padding:0 0 0 4px;list-style:none;max-height:320px;overflow:auto;font:12px/1.5 ui-monospace,"DejaVu Sans Mono",Menlo,monospace;border:1px solid #e2e8f0;border-radius:6px}
.trace li{padding:0 8px;cursor:pointer;white-space:pre}.trace li:hover{background:#f1f5f9}
.trace .k-fault{color:#be123c}.trace .k-leadership{color:#1e3a8a;font-weight:700}.trace .k-role{color:#334155}
.trace .k-client{color:#64748b}.trace .k-stale{color:#dc2626;font-weight:700}
.trace li.at{background:#fef9c3;outline:1px solid #facc15}
.trace li.future{opacity:.55}
""".replace("TWO_LEADERS", TWO_LEADERS)  # the report's palette: one colour per meaning

JS = r"""
(function(){
var D=JSON.parse(document.getElementById('replay-data').textContent);
var nodes=D.nodes,END=D.end_ms,W=1320,LEFT=120,PLOT=W-LEFT-16;
var ROLE={leader:['#1e3a8a','#fff','L'],candidate:['#f97316','#1f2937','C'],prospective:['#fcd34d','#1f2937','P'],
  follower:['#86efac','#14532d','F'],unattached:['#e2e8f0','#334155','U'],resigned:['#a8a29e','#fff','R']};
var EPOCH=['#1d4ed8','#0d9488','#9333ea','#c2410c','#be185d','#4d7c0f','#0369a1','#a16207'];
var TC=__TYPE_COLOURS__;
var state={t:D.start_ms,win:200,hidden:{},dropped:true,playing:null};
function $(id){return document.getElementById(id);}
function esc(s){return String(s).replace(/[&<>"']/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c];});}
function f1(v){return (Math.round(v*1000)/1000).toFixed(3);}
function ecol(e){return EPOCH[((e||1)-1)%EPOCH.length];}
// ---- event times for stepping
var roleTimes=[];nodes.forEach(function(n){D.segments[n].forEach(function(s){roleTimes.push(s[0]);});});
var storyTimes=D.story.map(function(s){return s[0];});
var momentTimes=D.moments.map(function(m){return m[0];}).sort(function(a,b){return a-b;});
var steps=[];
function rebuildSteps(){
  var t=roleTimes.concat(storyTimes);
  D.messages.forEach(function(m){if(visible(m)){t.push(m[0]);if(m[1]!==null)t.push(m[1]);}});
  t.sort(function(a,b){return a-b;});steps=[];
  for(var i=0;i<t.length;i++){if(!steps.length||t[i]-steps[steps.length-1]>1e-6)steps.push(t[i]);}
}
function visible(m){if(state.hidden[m[4]])return false;if(!state.dropped&&m[6]!=='delivered'&&m[6]!=='pending'&&m[6]!=='discarded')return false;return true;}
function nextIn(arr,t){for(var i=0;i<arr.length;i++)if(arr[i]>t+1e-6)return arr[i];return null;}
function prevIn(arr,t){for(var i=arr.length-1;i>=0;i--)if(arr[i]<t-1e-6)return arr[i];return null;}
// ---- role at a time
function segAt(n,t){var s=D.segments[n],r=null;for(var i=0;i<s.length;i++){if(s[i][0]<=t+1e-9)r=s[i];else break;}return r;}
// ---- close-up
function drawCloseup(){
  var svg=$('closeup-svg'),w=state.win,t0=state.t-w/2,t1=state.t+w/2;
  if(t0<0){t1-=t0;t0=0;} if(t1>END){t0=Math.max(0,t0-(t1-END));t1=END;}
  var laneH=58,top=26,H=top+laneH*nodes.length+10;
  function x(t){return LEFT+(t-t0)/(t1-t0)*PLOT;}
  var y={};nodes.forEach(function(n,i){y[n]=top+i*laneH+laneH/2;});
  var o=[];
  // axis ticks
  var step=niceStep((t1-t0)/8);
  for(var k=Math.ceil(t0/step)*step;k<=t1+1e-9;k+=step){var xx=x(k);
    o.push('<line class="grid" x1="'+xx+'" x2="'+xx+'" y1="'+(top-4)+'" y2="'+(H-8)+'"/>');
    o.push('<text class="tick" x="'+xx+'" y="14" text-anchor="middle">'+fmt(k)+' ms</text>');}
  // fault shading
  D.faults.forEach(function(f){if(f.end<t0||f.start>t1)return;var a=x(Math.max(f.start,t0)),b=x(Math.min(f.end,t1));
    f.cut_off.concat(f.one_way).forEach(function(n){o.push('<rect class="fault-shade'+(f.cut_off.indexOf(n)>=0?' strong':'')+'" x="'+a+'" y="'+(y[n]-laneH/2+3)+'" width="'+Math.max(1,b-a)+'" height="'+(laneH-6)+'"><title>'+esc(f.label)+'</title></rect>');});});
  // lanes
  nodes.forEach(function(n){
    var s=segAt(n,state.t),cy=y[n];
    o.push('<g class="cl-lane" data-node="'+n+'">');
    o.push('<text class="cl-lane-label" x="'+(LEFT-10)+'" y="'+(cy-2)+'" text-anchor="end">n'+n+'</text>');
    o.push('<text class="cl-lane-sub" x="'+(LEFT-10)+'" y="'+(cy+12)+'" text-anchor="end">'+(s?esc(s[2]+(s[3]!==null?' e'+s[3]:'')):'')+'</text>');
    o.push('<line class="proc-line" x1="'+LEFT+'" x2="'+(LEFT+PLOT)+'" y1="'+cy+'" y2="'+cy+'"/>');
    D.segments[n].forEach(function(g){if(g[1]<t0||g[0]>t1||g[1]<=g[0])return;
      var a=x(Math.max(g[0],t0)),b=x(Math.min(g[1],t1)),st=ROLE[g[2]];
      if(g[2]==='down'){o.push('<rect x="'+a+'" y="'+(cy-7)+'" width="'+Math.max(.6,b-a)+'" height="14" fill="url(#cl-hatch)"><title>n'+n+' down</title></rect>');return;}
      o.push('<rect class="cl-seg role-'+g[2]+'" x="'+a+'" y="'+(cy-7)+'" width="'+Math.max(.6,b-a)+'" height="14" rx="2" fill="'+(st?st[0]:'#cbd5e1')+'"><title>n'+n+' '+esc(g[2])+' e'+g[3]+' from '+f1(g[0])+' ms ('+esc(g[5])+')</title></rect>');
      if(b-a>46)o.push('<text class="role-text" x="'+(a+4)+'" y="'+(cy+4)+'" fill="'+(st?st[1]:'#000')+'">'+esc((b-a>110?g[2]:(st?st[2]:'?'))+' e'+g[3])+'</text>');});
    o.push('</g>');});
  // ops (completion) markers
  D.ops.forEach(function(op){if(op[1]<t0||op[1]>t1||y[op[6]]===undefined)return;var cx=x(op[1]),cy=y[op[6]]+17;
    var col=op[11]?'#dc2626':({ok:'#2563eb',fail:'#94a3b8',info:'#d97706'})[op[8]]||'#d97706';
    o.push('<g class="cl-op'+(op[11]?' cl-stale':'')+'"><title>'+esc('p'+op[2]+' '+op[3]+' '+op[4]+(op[3]==='write'?'='+op[5]:'')+' via n'+op[6]+(op[7]?' ('+op[7]+')':'')+': '+op[8]+(op[8]==='ok'&&op[3]==='read'?' '+op[5]:'')+(op[9]?' '+op[9]:'')+(op[11]?' — STALE':''))+'</title>'+
      (op[3]==='write'?'<rect x="'+(cx-3)+'" y="'+(cy-3)+'" width="6" height="6" fill="'+col+'"/>':'<circle cx="'+cx+'" cy="'+cy+'" r="'+(op[11]?5:3)+'" fill="'+col+'"/>')+'</g>');});
  // messages
  var drawn=0,labels=(t1-t0)<=250,placed=[];
  function freeSpot(lx,ly){for(var i=0;i<placed.length;i++)if(Math.abs(placed[i][0]-lx)<80&&Math.abs(placed[i][1]-ly)<11)return false;placed.push([lx,ly]);return true;}
  D.messages.forEach(function(m){
    if(!visible(m))return;var end=m[1]===null?m[0]+(t1-t0)/40:m[1];
    if(end<t0||m[0]>t1||y[m[2]]===undefined||y[m[3]]===undefined)return;
    var dropped=(m[6]==='partitioned'||m[6]==='lost'||m[6]==='refused'||m[6]==='discarded');
    var x0=x(m[0]),y0=y[m[2]],x1=x(end),y1=y[m[3]];
    if(dropped){x1=x0+(x1-x0)*0.55;y1=y0+(y1-y0)*0.55;}
    var resp=/Resp$/.test(m[4]);
    o.push('<g class="arrow-g t-'+m[4]+'"><title>'+esc(m[2]+'->'+m[3]+' '+m[4]+' '+m[7]+'  sent '+f1(m[0])+(m[1]!==null?' arrives '+f1(m[1]):'')+' ms  '+m[6])+'</title>'+
      '<line class="arrow t-'+m[4]+(resp?' resp':'')+(dropped?' dropped':'')+'" x1="'+x0+'" y1="'+y0+'" x2="'+x1+'" y2="'+y1+'" marker-end="'+(dropped?'':'url(#ah-'+m[4]+')')+'"/>');
    if(dropped)o.push('<path class="drop-x" d="M'+(x1-4)+' '+(y1-4)+'l8 8M'+(x1-4)+' '+(y1+4)+'l8 -8"/>');
    if(labels&&!dropped&&freeSpot((x0+x1)/2,(y0+y1)/2))o.push('<text class="arrow-label" x="'+((x0+x1)/2+3)+'" y="'+((y0+y1)/2-2)+'">'+esc(m[4]+' e'+m[5])+'</text>');
    o.push('</g>');drawn++;});
  var cx=x(state.t);o.push('<line class="cursor" x1="'+cx+'" x2="'+cx+'" y1="'+(top-6)+'" y2="'+(H-6)+'"/>');
  var defs='<defs><pattern id="cl-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#cbd5e1"/><line x1="0" y1="0" x2="0" y2="6" stroke="#475569" stroke-width="3"/></pattern>';
  Object.keys(TC).forEach(function(k){defs+='<marker id="ah-'+k+'" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="'+TC[k]+'"/></marker>';});
  svg.setAttribute('viewBox','0 0 '+W+' '+H);
  svg.innerHTML=defs+'</defs>'+o.join('');
  $('closeup-range').textContent=fmt(t0)+'–'+fmt(t1)+' ms, '+drawn+' messages';
  var ov=$('ov-window');if(ov){var ox0=LEFT+t0/END*PLOT,ox1=LEFT+t1/END*PLOT;ov.setAttribute('x',ox0);ov.setAttribute('width',Math.max(1,ox1-ox0));}
}
function niceStep(raw){var p=Math.pow(10,Math.floor(Math.log10(raw)));var m=[1,2,5,10];for(var i=0;i<4;i++)if(raw<=m[i]*p)return m[i]*p;return 10*p;}
function fmt(v){return Math.abs(v-Math.round(v))<1e-6?String(Math.round(v)):v.toFixed(1);}
// ---- logs at the clock
function logAt(n,t){
  var ops=D.logs[n]||[],recs=[],start=0,hw=0;
  for(var i=0;i<ops.length;i++){var op=ops[i];if(op[0]>t+1e-9)break;
    if(op[1]==='recover'){start=op[2];recs=op[3].map(function(r){return r.slice();});}
    else if(op[1]==='reset'){start=op[2];recs=[];}
    else if(op[1]==='truncate'){recs=recs.filter(function(r){return r[0]<op[2];});}
    else if(op[1]==='append'){recs=recs.filter(function(r){return r[0]<op[2];});recs.push(op.slice(2));}
    else if(op[1]==='hw'){hw=op[2];}}
  return {recs:recs,start:start,hw:hw};
}
function drawLogs(){
  var svg=$('logs-svg'),logs={},hi=0;
  nodes.forEach(function(n){var l=logAt(n,state.t);logs[n]=l;var e=l.recs.length?l.recs[l.recs.length-1][0]+1:l.start;hi=Math.max(hi,e,l.hw);});
  var cell=26,cols=Math.floor(PLOT/cell),lo=Math.max(0,hi-cols),rowH=40,top=8,H=top+rowH*nodes.length+4,o=[];
  nodes.forEach(function(n,i){
    var l=logs[n],y=top+i*rowH,s=segAt(n,state.t),down=s&&s[2]==='down';
    o.push('<g class="log-lane'+(down?' down':'')+'" data-node="'+n+'">');
    o.push('<text class="cl-lane-label" x="'+(LEFT-10)+'" y="'+(y+14)+'" text-anchor="end">n'+n+'</text>');
    var end=l.recs.length?l.recs[l.recs.length-1][0]+1:l.start;
    o.push('<text class="cl-lane-sub" x="'+(LEFT-10)+'" y="'+(y+27)+'" text-anchor="end">'+(down?'down':'hw '+l.hw+' · end '+end)+'</text>');
    l.recs.forEach(function(r){if(r[0]<lo)return;var xx=LEFT+(r[0]-lo)*cell,c=ecol(r[1]),committed=r[0]<l.hw;
      o.push('<g class="log-rec'+(committed?' committed':' uncommitted')+'"><title>'+esc('n'+n+' offset '+r[0]+' epoch '+r[1]+': '+r[3]+(committed?' (committed)':' (not committed)'))+'</title>'+
        '<rect class="log-box'+(committed?'':' uncommitted')+'" x="'+(xx+1)+'" y="'+(y+2)+'" width="'+(cell-3)+'" height="24" rx="3" fill="'+c+'" stroke="'+c+'"'+(down?' opacity=".45"':'')+'/>'+
        '<text class="log-text" x="'+(xx+cell/2-0.5)+'" y="'+(y+18)+'" fill="'+(committed?'#fff':c)+'">'+(r[2]==='leader-change'?'★':'')+r[1]+'</text></g>');});
    if(l.hw>=lo){var hx=LEFT+(l.hw-lo)*cell-1;o.push('<line class="hw-bar" x1="'+hx+'" x2="'+hx+'" y1="'+y+'" y2="'+(y+28)+'"><title>high watermark '+l.hw+'</title></line>');}
    o.push('</g>');});
  for(var k=lo;k<lo+cols;k+=5){o.push('<text class="log-off" x="'+(LEFT+(k-lo)*cell+cell/2)+'" y="'+(H-1)+'">'+k+'</text>');}
  svg.setAttribute('viewBox','0 0 '+W+' '+(H+8));svg.innerHTML=o.join('');
}
// ---- trace
var traceItems=[];
function buildTrace(){var ol=$('trace'),html=[];
  D.story.forEach(function(s,i){html.push('<li class="k-'+s[2]+'" data-t="'+s[0]+'">'+esc(('          '+s[0].toFixed(3)).slice(-10)+' '+s[1])+'</li>');});
  ol.innerHTML=html.join('');traceItems=Array.prototype.slice.call(ol.children);
  ol.addEventListener('click',function(ev){var li=ev.target.closest('li');if(li)setTime(parseFloat(li.dataset.t));});}
var lastAt=null;
function markTrace(){var at=null;
  for(var i=0;i<traceItems.length;i++){var ti=parseFloat(traceItems[i].dataset.t);traceItems[i].classList.toggle('future',ti>state.t+1e-6);if(ti<=state.t+1e-6)at=traceItems[i];}
  if(lastAt&&lastAt!==at)lastAt.classList.remove('at');
  if(at){at.classList.add('at');if(at!==lastAt){var ol=$('trace');ol.scrollTop=Math.max(0,at.offsetTop-ol.offsetTop-ol.clientHeight/2);}}
  lastAt=at;}
// ---- everything
function nowLine(){var parts=nodes.map(function(n){var s=segAt(n,state.t);return 'n'+n+': '+(s?s[2]+(s[3]!==null?' e'+s[3]:'')+(s[4]!==null&&s[2]!=='leader'?' (leader n'+s[4]+')':''):'–');});
  var cut=D.faults.filter(function(f){return f.start<=state.t&&state.t<f.end;}).map(function(f){return f.shape;});
  var el=$('now-line');el.textContent='At '+f1(state.t)+' ms — '+parts.join(' · ')+(cut.length?' · network: '+cut.join('; '):' · network whole');}
function setTime(t,keepPlaying){
  state.t=Math.min(Math.max(0,t),END);if(!keepPlaying)stop();
  $('slider').value=state.t;$('t-now').textContent=f1(state.t);
  var c=$('ov-cursor');if(c){var cx=LEFT+state.t/END*PLOT;c.setAttribute('x1',cx);c.setAttribute('x2',cx);}
  document.querySelectorAll('a.moment').forEach(function(a){a.classList.toggle('current',Math.abs(parseFloat(a.dataset.t)-state.t)<1e-6);});
  drawCloseup();drawLogs();markTrace();nowLine();
  document.body.dataset.t=state.t.toFixed(3);
}
function stop(){if(state.playing){clearInterval(state.playing);state.playing=null;$('b-play').textContent='▶ play';}}
function play(){if(state.playing){stop();return;}$('b-play').textContent='❚❚ pause';
  state.playing=setInterval(function(){var t=state.t+state.win/40;if(t>=END){setTime(END);stop();return;}setTime(t,true);},40);}
function step(dir,arr){var t=dir>0?nextIn(arr,state.t):prevIn(arr,state.t);if(t!==null)setTime(t);}
$('slider').addEventListener('input',function(){setTime(parseFloat(this.value));});
$('b-first').onclick=function(){setTime(0);};$('b-last').onclick=function(){setTime(END);};
$('b-prev').onclick=function(){step(-1,steps);};$('b-next').onclick=function(){step(1,steps);};
$('b-prev-moment').onclick=function(){step(-1,momentTimes);};$('b-next-moment').onclick=function(){step(1,momentTimes);};
$('b-play').onclick=play;
$('window').addEventListener('change',function(){state.win=parseFloat(this.value);setTime(state.t);});
document.querySelectorAll('input[data-type]').forEach(function(box){box.addEventListener('change',function(){
  state.hidden[box.dataset.type]=!box.checked;document.body.classList.toggle('hide-t-'+box.dataset.type,!box.checked);rebuildSteps();drawCloseup();});});
$('show-dropped').addEventListener('change',function(){state.dropped=this.checked;rebuildSteps();drawCloseup();});
document.querySelectorAll('a.moment').forEach(function(a){a.addEventListener('click',function(ev){ev.preventDefault();setTime(parseFloat(a.dataset.t));$('closeup').scrollIntoView({behavior:'smooth',block:'start'});});});
document.addEventListener('keydown',function(ev){
  if(ev.target&&ev.target.tagName==='SELECT')return;
  if(ev.key==='ArrowRight'){step(1,ev.shiftKey?momentTimes:steps);ev.preventDefault();}
  else if(ev.key==='ArrowLeft'){step(-1,ev.shiftKey?momentTimes:steps);ev.preventDefault();}
  else if(ev.key==='Home'){setTime(0);ev.preventDefault();}
  else if(ev.key==='End'){setTime(END);ev.preventDefault();}
  else if(ev.key===' '&&ev.target.tagName!=='BUTTON'){play();ev.preventDefault();}});
var ovs=document.querySelector('svg.overview');
if(ovs)ovs.addEventListener('click',function(ev){var m=ovs.getScreenCTM();if(!m)return;var p=ovs.createSVGPoint();p.x=ev.clientX;p.y=ev.clientY;p=p.matrixTransform(m.inverse());
  setTime((p.x-LEFT)/PLOT*END);});
state.win=parseFloat($('window').value);
rebuildSteps();buildTrace();setTime(D.start_ms);
document.body.classList.add('replay-ready');
})();
"""
JS = JS.replace("__TYPE_COLOURS__", "{" + ",".join(f'"{k}":"{v}"' for k, v in TYPE_COLOURS.items()) + "}")
