"""Node metrics in the Prometheus text format, and a tiny HTTP endpoint.

No client library: a handful of gauges, counters and histograms rendered by
hand is all a node needs, and keeps the dependency list short.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .._node import QuorumNode
    from .._output import RoleChange

logger = logging.getLogger("pykraft.metrics")

_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


FINE_BUCKETS_S = (0.000005, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.005, 0.01)


@dataclass(slots=True)
class Histogram:
    buckets_s: tuple[float, ...] = _LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total_s: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets_s) + 1)

    def observe(self, value_s: float) -> None:
        self.counts[bisect.bisect_left(self.buckets_s, value_s)] += 1
        self.total_s += value_s
        self.count += 1

    def render(self, name: str, help_text: str, labels: str) -> list[str]:
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(self.buckets_s, self.counts):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels}le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{{labels}le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels.rstrip(',')}}} {self.total_s}")
        lines.append(f"{name}_count{{{labels.rstrip(',')}}} {self.count}")
        return lines


class Metrics:
    """What a node exports. Updated by the runtime; read by ``render``."""

    def __init__(self) -> None:
        self.node_id = -1
        self.leader_id = -1
        self.epoch = 0
        self.role = "unattached"
        self.high_watermark = 0
        self.log_end_offset = 0
        self.replica_lag: dict[int, int] = {}
        self.elections_started = 0
        self.resignations: dict[str, int] = {}
        # 1 while writes to this node's disk fail (docs/storage.md, "Disk
        # errors"); failed write rounds by errno name.
        self.disk_failed = 0
        self.disk_failures: dict[str, int] = {}
        # Snapshots the state machine failed to take (skipped, retried later).
        self.snapshot_failures = 0
        self.commit_seconds = Histogram()
        self.fsync_seconds = Histogram()
        # Metrics an application adds (the controller's): name -> labels -> value.
        self.gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self.histograms: dict[str, Histogram] = {}
        self.help_texts: dict[str, str] = {}

    def set_gauge(self, name: str, value: float, help_text: str = "", **labels: str) -> None:
        self.gauges.setdefault(name, {})[tuple(sorted(labels.items()))] = value
        if help_text:
            self.help_texts[name] = help_text

    def add_to_counter(self, name: str, amount: float = 1, help_text: str = "", **labels: str) -> None:
        series = self.gauges.setdefault(name, {})
        key = tuple(sorted(labels.items()))
        series[key] = series.get(key, 0) + amount
        if help_text:
            self.help_texts[name] = help_text

    def histogram(self, name: str, help_text: str = "", buckets_s: tuple[float, ...] = _LATENCY_BUCKETS_S) -> Histogram:
        if help_text:
            self.help_texts[name] = help_text
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms[name] = Histogram(buckets_s)
        return histogram

    def observe_node(self, node: QuorumNode) -> None:
        self.node_id = node.node_id
        self.leader_id = node.leader_id if node.leader_id is not None else -1
        self.epoch = node.epoch
        self.role = node.role.value
        self.high_watermark = node.high_watermark
        self.log_end_offset = node.log.end_offset

    def observe_lag(self, node: QuorumNode) -> None:
        description = node.describe()
        self.replica_lag = {
            replica.node_id: max(0, description.log_end_offset - replica.log_end_offset)
            for replica in description.voters + description.observers
            if replica.log_end_offset is not None and replica.node_id != node.node_id
        }

    def on_role_change(self, event: RoleChange) -> None:
        if event.role.value == "candidate":
            self.elections_started += 1
        elif event.role.value == "resigned":
            cause = "check_quorum" if event.reason.startswith("check quorum") else "requested"
            if event.reason.startswith("restarted"):
                cause = "restart"
            elif event.reason.startswith("resigned: disk failed"):
                cause = "disk_failed"
            self.resignations[cause] = self.resignations.get(cause, 0) + 1

    def render(self) -> str:
        labels = f'node="{self.node_id}",'
        node = labels.rstrip(",")
        lines = [
            "# HELP pykraft_quorum_leader_id Current leader, -1 if unknown.",
            "# TYPE pykraft_quorum_leader_id gauge",
            f"pykraft_quorum_leader_id{{{node}}} {self.leader_id}",
            "# HELP pykraft_quorum_epoch Current epoch.",
            "# TYPE pykraft_quorum_epoch gauge",
            f"pykraft_quorum_epoch{{{node}}} {self.epoch}",
            "# HELP pykraft_quorum_role 1 for the node's current role.",
            "# TYPE pykraft_quorum_role gauge",
            f'pykraft_quorum_role{{{labels}role="{self.role}"}} 1',
            "# HELP pykraft_quorum_high_watermark Offset below which every record is committed.",
            "# TYPE pykraft_quorum_high_watermark gauge",
            f"pykraft_quorum_high_watermark{{{node}}} {self.high_watermark}",
            "# HELP pykraft_quorum_log_end_offset Offset after the last record.",
            "# TYPE pykraft_quorum_log_end_offset gauge",
            f"pykraft_quorum_log_end_offset{{{node}}} {self.log_end_offset}",
            "# HELP pykraft_quorum_replica_fetch_lag_records Leader only: records a replica is behind.",
            "# TYPE pykraft_quorum_replica_fetch_lag_records gauge",
        ]
        for replica, lag in sorted(self.replica_lag.items()):
            lines.append(f'pykraft_quorum_replica_fetch_lag_records{{{labels}replica="{replica}"}} {lag}')
        lines += [
            "# HELP pykraft_quorum_elections_started_total Candidacies started by this node.",
            "# TYPE pykraft_quorum_elections_started_total counter",
            f"pykraft_quorum_elections_started_total{{{node}}} {self.elections_started}",
            "# HELP pykraft_quorum_resignations_total Leader resignations by cause.",
            "# TYPE pykraft_quorum_resignations_total counter",
        ]
        for cause, count in sorted(self.resignations.items()):
            lines.append(f'pykraft_quorum_resignations_total{{{labels}cause="{cause}"}} {count}')
        lines += [
            "# HELP pykraft_quorum_disk_failed 1 while writes to this node's disk fail (it acknowledges nothing).",
            "# TYPE pykraft_quorum_disk_failed gauge",
            f"pykraft_quorum_disk_failed{{{node}}} {self.disk_failed}",
            "# HELP pykraft_quorum_disk_failures_total Failed disk write rounds (write or fsync) by errno.",
            "# TYPE pykraft_quorum_disk_failures_total counter",
        ]
        for errno_name, count in sorted(self.disk_failures.items()):
            lines.append(f'pykraft_quorum_disk_failures_total{{{labels}errno="{errno_name}"}} {count}')
        lines += [
            "# HELP pykraft_quorum_snapshot_failures_total Snapshots the state machine failed to take (skipped, retried later).",
            "# TYPE pykraft_quorum_snapshot_failures_total counter",
            f"pykraft_quorum_snapshot_failures_total{{{node}}} {self.snapshot_failures}",
        ]
        lines += self.commit_seconds.render(
            "pykraft_quorum_commit_latency_seconds", "Proposal to commit, on the leader.", labels
        )
        lines += self.fsync_seconds.render("pykraft_quorum_fsync_latency_seconds", "One group fsync.", labels)
        for name, series in sorted(self.gauges.items()):
            kind = "counter" if name.endswith("_total") else "gauge"
            lines += [f"# HELP {name} {self.help_texts.get(name, name)}", f"# TYPE {name} {kind}"]
            for label_pairs, value in sorted(series.items()):
                extra = "".join(f',{key}="{label}"' for key, label in label_pairs)
                lines.append(f"{name}{{{node}{extra}}} {value}")
        for name, histogram in sorted(self.histograms.items()):
            lines += histogram.render(name, self.help_texts.get(name, name), labels)
        return "\n".join(lines) + "\n"


async def serve_metrics(
    metrics: Metrics, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``GET /metrics`` over HTTP/1.0; reports the bound port."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(5):
                request = b""
                while b"\r\n\r\n" not in request and len(request) < 8192:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    request += chunk
                path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
                if path.split(b"?")[0] == b"/metrics":
                    body = metrics.render().encode()
                    head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                else:
                    body = b"not found: try /metrics\n"
                    head = b"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                await stream.send_all(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            logger.debug("metrics connection failed: %s", error)
        finally:
            await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host=host)
    bound_port = listeners[0].socket.getsockname()[1]
    task_status.started(bound_port)
    await trio.serve_listeners(handle, listeners)


async def scrape_metrics(host: str, port: int) -> str:
    """``GET /metrics`` from a node's endpoint; the whole response text
    (status line and headers included). Raises ``OSError`` when nothing
    listens there."""
    stream = await trio.open_tcp_stream(host, port)
    try:
        await stream.send_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        while chunk := await stream.receive_some(65536):
            body += chunk
    finally:
        await stream.aclose()
    return body.decode()
