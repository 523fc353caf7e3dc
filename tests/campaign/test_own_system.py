"""A campaign against a system not built on pykraft (issue 20, item 6): a
tiny HTTP key-value server (tests/campaign/http_kv_server.py, written for
this test) driven through a client adapter, ``invoke(op) -> result``, as
Jepsen's clients do, checked as a compare-and-set register."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jepsen_like.campaign import Failed, NodeSpec, run_own_campaign
from jepsen_like.campaign.pytest_plugin import process_cluster  # noqa: F401  (the fixture)
from jepsen_like.checker import CAS_REGISTER

pytestmark = pytest.mark.processes

SERVER = Path(__file__).with_name("http_kv_server.py")
# Longer than a fault lasts, so that a paused or cut-off server that comes
# back answers: each indeterminate operation costs the search.
REQUEST_TIMEOUT_S = 10


class HttpRegisterClient:
    """One worker's adapter: register ``x`` over HTTP on node 1. A plain
    function (run on a worker thread); a refused connection sent nothing
    (``Failed``), a timeout or a reset may have been applied (``info``)."""

    def __init__(self, addresses: dict[int, tuple[str, int]]) -> None:
        host, port = addresses[1]
        self.base = f"http://{host}:{port}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, {}
        except urllib.error.URLError as error:
            if isinstance(error.reason, ConnectionRefusedError):
                raise Failed("connection refused: nothing was sent") from None
            raise

    def invoke(self, op: dict[str, Any]) -> Any:
        if op["f"] == "read":
            return self._call("GET", "/kv/x")[1]["value"]
        if op["f"] == "write":
            self._call("PUT", "/kv/x", {"value": op["value"]})
            return op["value"]
        expected, new = op["value"]
        status, _ = self._call("POST", "/cas/x", {"expected": expected, "new": new})
        if status == 409:
            raise Failed(f"x is not {expected}")
        return op["value"]


def generate(rng) -> dict[str, Any]:
    f = rng.choice(("read", "read", "write", "cas"))
    if f == "read":
        return {"f": "read", "value": None}
    if f == "write":
        return {"f": "write", "value": rng.randint(0, 4)}
    return {"f": "cas", "value": [rng.randint(0, 4), rng.randint(0, 4)]}


def server_command(*extra: str):
    def command(spec: NodeSpec) -> list[str]:
        host, port = spec.listen
        return [sys.executable, str(SERVER), "--listen", f"{host}:{port}", "--data-dir", str(spec.data_dir), *extra]

    return command


async def test_an_http_register_that_fsyncs_survives_kills_pauses_and_partitions(process_cluster, tmp_path):  # noqa: F811
    cluster = process_cluster(server_command(), HttpRegisterClient, nodes=1)
    result = await run_own_campaign(
        cluster, model=CAS_REGISTER, generate=generate, run_dir=tmp_path / "run",
        duration_s=4, fault_s=0.5, seed=5, checker="search",
    )  # fmt: skip
    assert result.valid is True, result.result
    assert result.counts["ok"] > 50
    assert result.faults >= 2


async def test_stale_reads_of_an_http_register_are_found(process_cluster, tmp_path):  # noqa: F811
    cluster = process_cluster(server_command("--stale-reads-ms", "300"), HttpRegisterClient, nodes=1)
    result = await run_own_campaign(
        cluster, model=CAS_REGISTER, generate=generate, run_dir=tmp_path / "run",
        duration_s=3, nemeses=(), seed=5, checker="search",
    )  # fmt: skip
    assert result.valid is False
    [verdict] = result.result.values()
    assert verdict.witness["op"]["f"] in ("read", "cas")
