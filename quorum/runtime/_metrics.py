"""A node's metrics through ``prometheus_client``, and its HTTP endpoint.

One ``CollectorRegistry`` per node (embedded nodes in one process do not
collide), with the library's process, platform and GC collectors. Every
pykraft series carries a ``node`` label, so a dashboard can tell nodes apart
without relabelling.

Two kinds of series:

- Events (counters, histograms, gauges set on a transition) are updated
  where they happen, through ``add_to_counter``, ``set_gauge`` and
  ``histogram`` (or the bound children the runtime keeps for its hot path).
- State (role, leader, epoch, offsets, lag, pending proposals...) is read
  from the node when a scrape asks for it, by the collectors added with
  ``add_collector``: nothing on the hot path pays for them.

The endpoint runs in the node's trio loop, not in the library's thread
server: a scrape then reads the node's state between two steps of the loop
(no lock, no torn read), and the request is bounded here the way every other
input is (size, time, connections), which ``start_http_server`` does not do
(one thread per connection, no deadline). Its exposition (text or
OpenMetrics, by the scraper's ``Accept``) is the library's.
"""

from __future__ import annotations

import json
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import (
    GC_COLLECTOR,
    disable_created_metrics,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .._output import RoleChange

logger = logging.getLogger("pykraft.metrics")

# No ``<name>_created`` series next to each counter and histogram: they
# double the scrape for a value no alert or panel here reads. (A library-wide
# switch: it applies to every registry in the process.)
disable_created_metrics()

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
FINE_BUCKETS_S = (0.000005, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.005, 0.01)

# The endpoint's bounds: a scraper's request head (a GET has no body), the
# time it has to send it and read the answer, and how many may be connected,
# in all and from one address. The per-address bound is what keeps a
# scraper served while another host holds connections open with requests it
# never finishes: with the total alone, 16 such connections from anywhere
# made every scrape fail (found by hand: 300 of them from one address).
REQUEST_HEAD_BYTES_MAX = 8192
REQUEST_TIMEOUT_S = 5.0
CONNECTIONS_MAX = 64
CONNECTIONS_PER_ADDRESS_MAX = 4


class _CallbackCollector(Collector):
    """Families computed at scrape time by ``produce`` (state, not events)."""

    def __init__(self, produce: Callable[[], Iterable[Metric]]) -> None:
        self._produce = produce

    def collect(self) -> Iterable[Metric]:
        return list(self._produce())

    def describe(self) -> Iterable[Metric]:
        return ()  # not checked for duplicates at registration


class _Unmeasured:
    """The child every update reaches when metrics are off: does nothing."""

    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_UNMEASURED = _Unmeasured()


class _LoopHistogram:
    """One labelled histogram, kept in plain Python numbers and exported at
    scrape time (``_LoopHistograms``). ``prometheus_client``'s own takes a
    lock per ``observe`` and walks its buckets in Python: several a write
    (the leader's commit latency, each voter's write and fsync durations)
    cost about 15% of a write's CPU in memory (bench.metrics_cost_bench).
    Each histogram has one writer thread; a scrape from the loop may see an
    observation in its count and not yet in its sum, never a torn number."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class _LoopHistograms(Collector):
    """Every ``_LoopHistogram`` of one family, as a histogram at scrape time."""

    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...], bounds: tuple[float, ...]) -> None:
        self.name, self.help_text, self.label_names, self.bounds = name, help_text, label_names, bounds
        self.children: dict[tuple[str, ...], _LoopHistogram] = {}
        self._edges = [floatToGoString(bound) for bound in bounds] + ["+Inf"]

    def child(self, label_values: tuple[str, ...]) -> _LoopHistogram:
        found = self.children.get(label_values)
        if found is None:
            found = self.children[label_values] = _LoopHistogram(self.bounds)
        return found

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.help_text, labels=self.label_names)
        for label_values, child in list(self.children.items()):
            cumulative, buckets = 0, []
            for edge, count in zip(self._edges, list(child.counts)):
                cumulative += count
                buckets.append((edge, cumulative))
            family.add_metric(list(label_values), buckets, child.sum)
        return [family]

    def describe(self) -> Iterable[Metric]:
        return ()


class Metrics:
    """What a node exports: a registry, and the ways to update it.
    ``enabled=False`` keeps nothing (every update is a no-op, the registry
    stays empty): for measuring what metrics cost (bench/metrics_cost_bench)."""

    def __init__(self, node_id: int = -1, *, enabled: bool = True) -> None:
        self.node_id = node_id
        self.enabled = enabled
        self._node_label = str(node_id)
        self.registry = CollectorRegistry(auto_describe=False)
        if enabled:
            for shared in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                # The library's default collectors, in this node's registry
                # too (a collector may be registered in several registries).
                self.registry.register(shared)
        self._families: dict[str, Counter | Gauge | Histogram] = {}
        self._histograms: dict[str, _LoopHistograms] = {}
        # The health checks (``GET /health``, ``GET /ready``): each returns
        # (ok, reason); set by the runtime.
        self.health_check: Callable[[], tuple[bool, str]] | None = None
        self.ready_check: Callable[[], tuple[bool, str]] | None = None
        self.commit_seconds = self.histogram(
            "pykraft_quorum_commit_latency_seconds", "Leader only: proposal to commit."
        )
        self.fsync_seconds = self.histogram(
            "pykraft_quorum_fsync_duration_seconds", "One group write and fsync of the log."
        )
        # Election latency: from this node's candidacy (or pre-vote) to its
        # leadership (Kafka's election-latency-avg/max).
        self._election_started_s: float | None = None
        self._leader_seen: tuple[int, int] | None = None

    # -- registration -----------------------------------------------------

    def add_collector(self, produce: Callable[[], Iterable[Metric]]) -> None:
        """Add families computed at each scrape by ``produce()``, which runs
        in the node's trio thread and must not raise or block."""
        if self.enabled:
            self.registry.register(_CallbackCollector(produce))

    def _family(self, kind: type, name: str, help_text: str, label_names: Iterable[str], **extra: Any) -> Any:
        family = self._families.get(name)
        if family is None:
            exposed = name.removesuffix("_total") if kind is Counter else name
            family = kind(
                exposed,
                help_text or name,
                ("node", *label_names),
                registry=self.registry,
                **extra,
            )
            self._families[name] = family
        return family

    # -- updates ----------------------------------------------------------

    def counter(self, name: str, help_text: str = "", **labels: str) -> Any:
        """The counter child for ``labels``; ``name`` ends in ``_total``.
        Keep it to count on a hot path (``.inc(amount)``)."""
        if not self.enabled:
            return _UNMEASURED
        family = self._family(Counter, name, help_text, sorted(labels))
        return family.labels(node=self._node_label, **labels)

    def gauge(self, name: str, help_text: str = "", **labels: str) -> Any:
        """The gauge child for ``labels`` (``.set(value)``)."""
        if not self.enabled:
            return _UNMEASURED
        family = self._family(Gauge, name, help_text, sorted(labels))
        return family.labels(node=self._node_label, **labels)

    def set_gauge(self, name: str, value: float, help_text: str = "", **labels: str) -> None:
        self.gauge(name, help_text, **labels).set(value)

    def add_to_counter(self, name: str, amount: float = 1, help_text: str = "", **labels: str) -> None:
        self.counter(name, help_text, **labels).inc(amount)

    def histogram(
        self, name: str, help_text: str = "", buckets_s: tuple[float, ...] = LATENCY_BUCKETS_S, **labels: str
    ) -> Any:
        """The histogram child for ``labels`` (``.observe(seconds)``): a
        ``_LoopHistogram``, cheap enough for the write path."""
        if not self.enabled:
            return _UNMEASURED
        family = self._histograms.get(name)
        if family is None:
            family = _LoopHistograms(name, help_text or name, ("node", *sorted(labels)), tuple(buckets_s))
            self.registry.register(family)
            self._histograms[name] = family
        return family.child((self._node_label, *(labels[key] for key in sorted(labels))))

    def on_role_change(self, event: RoleChange) -> None:
        """Count elections, leader changes and resignations, and time
        elections (this node's candidacy to its leadership)."""
        role = event.role.value
        if role in ("prospective", "candidate"):
            if role == "candidate":
                self.add_to_counter("pykraft_quorum_elections_started_total", 1, "Candidacies started by this node.")
            if self._election_started_s is None:
                self._election_started_s = time.perf_counter()
        else:
            if role == "leader":
                self.add_to_counter("pykraft_quorum_elections_won_total", 1, "Elections this node won.")
                if self._election_started_s is not None:
                    self.histogram(
                        "pykraft_quorum_election_duration_seconds",
                        "This node's pre-vote or candidacy to its leadership.",
                    ).observe(time.perf_counter() - self._election_started_s)
            self._election_started_s = None
        if role == "resigned":
            cause = "check_quorum" if event.reason.startswith("check quorum") else "requested"
            if event.reason.startswith("restarted"):
                cause = "restart"
            elif event.reason.startswith("resigned: disk failed"):
                cause = "disk_failed"
            self.add_to_counter("pykraft_quorum_resignations_total", 1, "Leader resignations by cause.", cause=cause)
        if event.leader_id is not None and (event.epoch, event.leader_id) != self._leader_seen:
            self._leader_seen = (event.epoch, event.leader_id)
            self.add_to_counter(
                "pykraft_quorum_leader_changes_total", 1, "Leaders this node learned of (a new leader or epoch)."
            )

    # -- reading ----------------------------------------------------------

    def value(self, name: str, **labels: str) -> float | None:
        """The current value of one sample (``node`` implied), ``None`` if
        it was never set: for tests and tools."""
        return self.registry.get_sample_value(name, {"node": self._node_label, **labels})

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample named ``name`` (a counter's with its ``_total``),
        keyed by its labels other than ``node``, sorted: for tests and
        tools."""
        found: dict[tuple[tuple[str, str], ...], float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    labels = tuple(sorted((key, value) for key, value in sample.labels.items() if key != "node"))
                    found[labels] = sample.value
        return found

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition for a scraper sending ``accept``, and its content
        type (text format unless OpenMetrics is asked for)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def text(self) -> str:
        """The text exposition, for tests and tools."""
        return self.render()[0].decode()


def _http_answer(status: str, content_type: str, body: bytes, head_only: bool = False) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode("ascii") + (b"" if head_only else body)


def _health_answer(check: Callable[[], tuple[bool, str]] | None, head_only: bool) -> bytes:
    try:
        ok, reason = check() if check is not None else (False, "no check configured")
    except Exception as error:  # noqa: BLE001 - a check's bug must not take the node down
        logger.exception("health check failed")
        ok, reason = False, f"the check failed: {type(error).__name__}"

    body = (json.dumps({"ok": ok, "reason": reason}) + "\n").encode()
    return _http_answer("200 OK" if ok else "503 Service Unavailable", "application/json", body, head_only)


def answer_http_request(metrics: Metrics, head: bytes) -> bytes:
    """The whole HTTP answer to one request head (untrusted): ``GET`` or
    ``HEAD`` of ``/metrics``, ``/health`` or ``/ready``; anything else is
    answered 400, 404 or 405. Never raises on the request's content."""
    request_line, _, header_block = head.partition(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return _http_answer("400 Bad Request", "text/plain", b"bad request line\n")
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return _http_answer("405 Method Not Allowed", "text/plain", b"GET or HEAD only\n")
    head_only = method == b"HEAD"
    if target == b"/metrics":
        accept = ""
        for line in header_block.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"accept":
                accept = value.strip().decode("latin-1")
        try:
            body, content_type = metrics.render(accept)
        except Exception:  # noqa: BLE001 - a collector's bug must not take the node down
            logger.exception("node %d: cannot render the metrics", metrics.node_id)
            return _http_answer("500 Internal Server Error", "text/plain", b"cannot render the metrics\n", head_only)
        return _http_answer("200 OK", content_type, body, head_only)
    if target == b"/health":
        return _health_answer(metrics.health_check, head_only)
    if target == b"/ready":
        return _health_answer(metrics.ready_check, head_only)
    return _http_answer("404 Not Found", "text/plain", b"not found: try /metrics, /health or /ready\n", head_only)


async def serve_metrics(
    metrics: Metrics,
    host: str,
    port: int,
    *,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    connections_max: int = CONNECTIONS_MAX,
    connections_per_address_max: int = CONNECTIONS_PER_ADDRESS_MAX,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/metrics``, ``/health`` and ``/ready`` over HTTP (one
    request per connection); reports the bound port. A scraper has
    ``request_timeout_s`` to send its request head (at most
    ``REQUEST_HEAD_BYTES_MAX`` bytes) and read the answer; beyond
    ``connections_max`` open connections, or ``connections_per_address_max``
    from the new one's address, a new one is closed at once. Refusals are
    counted in ``pykraft_metrics_requests_refused_total``."""
    open_connections = 0
    open_by_address: dict[str, int] = {}

    def refused(reason: str) -> None:
        metrics.add_to_counter(
            "pykraft_metrics_requests_refused_total", 1, "Metrics endpoint requests refused, by reason.", reason=reason
        )

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal open_connections
        try:
            address = str(stream.socket.getpeername()[0])
        except OSError:  # already gone
            await stream.aclose()
            return
        if open_connections >= connections_max or open_by_address.get(address, 0) >= connections_per_address_max:
            refused("connections_full" if open_connections >= connections_max else "address_full")
            await stream.aclose()
            return
        open_connections += 1
        open_by_address[address] = open_by_address.get(address, 0) + 1
        try:
            with trio.move_on_after(request_timeout_s) as deadline:
                request = b""
                while b"\r\n\r\n" not in request:
                    if len(request) > REQUEST_HEAD_BYTES_MAX:
                        refused("head_too_large")
                        await stream.send_all(
                            _http_answer("431 Request Header Fields Too Large", "text/plain", b"request head too large\n")
                        )
                        return
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    request += chunk
                head = request.split(b"\r\n\r\n", 1)[0]
                await stream.send_all(answer_http_request(metrics, head))
            if deadline.cancelled_caught:
                refused("deadline")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            logger.debug("metrics connection failed: %s", error)
        except Exception:  # noqa: BLE001 - one scrape must not take the node down
            logger.exception("metrics request failed")
        finally:
            open_connections -= 1
            if open_by_address[address] == 1:
                del open_by_address[address]
            else:
                open_by_address[address] -= 1
            with trio.move_on_after(0) as cleanup:
                cleanup.shield = True
                await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host=host)
    bound_port = listeners[0].socket.getsockname()[1]
    task_status.started(bound_port)
    await trio.serve_listeners(handle, listeners)


async def http_get(host: str, port: int, path: str = "/metrics", *, timeout_s: float = 10.0) -> tuple[int, str]:
    """``GET path`` from a node's endpoint: the status code and the body.
    Raises ``OSError`` when nothing listens there, ``trio.TooSlowError``
    past ``timeout_s``."""
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream(host, port)
        try:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            raw = b""
            while chunk := await stream.receive_some(65536):
                raw += chunk
        finally:
            await stream.aclose()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.count(b" ") >= 1 else 0
    return status, body.decode()


async def scrape_metrics(host: str, port: int) -> str:
    """``GET /metrics`` from a node's endpoint: the exposition text. Raises
    ``OSError`` when nothing listens there."""
    return (await http_get(host, port, "/metrics"))[1]
