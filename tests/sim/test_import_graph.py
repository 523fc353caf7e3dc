"""The simulator runs in the browser (Pyodide): its whole import graph stays
free of trio, sockets and fcntl, and it reaches the system only through the
sans-IO hosts (``quorum.ReplicaHost``), never through ``quorum.runtime``."""

import json
import subprocess
import sys

FORBIDDEN_ROOTS = ("trio", "socket", "_socket", "selectors", "fcntl")
FORBIDDEN_PACKAGES = ("quorum.runtime", "quorum.storage", "broker_agent._agent", "broker_agent._config")


def test_the_simulator_imports_no_trio_socket_or_runtime() -> None:
    probe = "import json, sys, jepsen_like.sim; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout)
    offending = [
        name
        for name in loaded
        if name.split(".")[0] in FORBIDDEN_ROOTS or any(name == p or name.startswith(p + ".") for p in FORBIDDEN_PACKAGES)
    ]
    assert offending == []


def test_the_trio_side_is_still_reachable_by_its_public_names() -> None:
    from broker_agent import BrokerConfig, open_broker
    from registration import open_controller_node

    assert callable(open_broker) and callable(open_controller_node) and BrokerConfig.__name__ == "BrokerConfig"
