"""A real Prometheus (Debian's ``prometheus`` package) on loopback, scraping
a cluster's metrics endpoints: its scrape configuration, the server process
and its HTTP query API. Used by the tests of the metrics, alerts and
dashboard (tests/prometheus) and by ``jepsen-like campaign --prometheus``.
``tools/prometheus-tools.sh`` installs the package (``make test`` runs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ALERT_RULES = ROOT / "docs" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "docs" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
MISSING_REASON = "no prometheus/promtool (Debian package 'prometheus'; tools/prometheus-tools.sh installs it as root)"

# The queries an operator starts from (the campaign report links them).
KEY_QUERIES = {
    "leader": 'pykraft_quorum_leader_id * on(node) pykraft_quorum_role{role="leader"}',
    "high watermark": "pykraft_quorum_high_watermark",
    "commit latency p99": "histogram_quantile(0.99, sum by (le) (rate(pykraft_quorum_commit_latency_seconds_bucket[1m])))",
    "leader changes": "increase(pykraft_quorum_leader_changes_total[5m])",
    "fsync p99": "histogram_quantile(0.99, sum by (le, node) (rate(pykraft_quorum_fsync_duration_seconds_bucket[1m])))",
    "fenced brokers": 'pykraft_controller_brokers{state="fenced"} * on(node) pykraft_controller_active',
}


class PrometheusError(Exception):
    """Prometheus did not start, or its API answered an error."""


def installed() -> bool:
    """True when both ``prometheus`` and ``promtool`` are on PATH."""
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def scrape_config(
    targets: dict[str, list[tuple[str, int]]], *, scrape_interval_s: float = 1.0, rule_files: list[Path] | None = None
) -> str:
    """The YAML configuration scraping ``targets`` (job -> host:port list)
    every ``scrape_interval_s`` (evaluating rules as often), loading
    ``rule_files``. JSON is YAML: no YAML library needed."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"{host}:{port}" for host, port in addresses]}]}
            for job, addresses in sorted(targets.items())
        ],
    }
    if rule_files:
        config["rule_files"] = [str(path) for path in rule_files]
    return json.dumps(config, indent=2) + "\n"


@dataclass
class Prometheus:
    """A running server; ``stop()`` ends it."""

    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def graph_link(self, query: str) -> str:
        """A link to ``query`` in the server's own graph page."""
        return f"{self.url}/graph?" + urllib.parse.urlencode({"g0.expr": query, "g0.tab": "0", "g0.range_input": "15m"})

    def _get(self, path: str, timeout_s: float = 10.0) -> Any:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as answer:  # noqa: S310 - loopback only
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")[:500]
            raise PrometheusError(f"{path}: HTTP {error.code}: {body}") from None

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one element) ``promql`` returns
        now. Raises ``PrometheusError`` for a query that does not parse or
        fails, ``OSError`` when the server does not answer."""
        answer = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if answer.get("status") != "success":
            raise PrometheusError(f"{promql}: {answer.get('errorType')}: {answer.get('error')}")
        data = answer["data"]
        return data["result"] if data["resultType"] in ("vector", "matrix") else [{"value": data["result"]}]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its health (``/api/v1/rules``)."""
        groups = self._get("/api/v1/rules")["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:  # noqa: S310 - loopback only
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_prometheus(directory: Path, config_text: str, port: int, *, ready_timeout_s: float = 30.0) -> Prometheus:
    """Write ``config_text`` into ``directory`` and start Prometheus on
    127.0.0.1:``port`` with its data there; returns once it is ready.
    Raises ``PrometheusError`` when it exits or is not ready in time (its
    log's tail in the message), ``FileNotFoundError`` when not installed."""
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "prometheus.yml"
    config_path.write_text(config_text)
    log_path = directory / "prometheus.log"
    argv = [
        "prometheus",
        f"--config.file={config_path}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Prometheus(process, port, log_path)
    deadline = time.monotonic() + ready_timeout_s
    while not server.ready():
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log_path.read_text(errors="replace")[-2000:]
            raise PrometheusError(f"prometheus did not become ready on port {port}:\n{tail}")
        time.sleep(0.1)
    return server


def promtool(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``promtool args``; the finished process (caller judges it)."""
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=timeout_s, check=False)


def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of the Grafana
    dashboard at ``path``."""
    dashboard = json.loads(path.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
