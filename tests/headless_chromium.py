"""Headless Chromium for the tests that render a page (the campaign report,
the simulator's replay) or drive one (the playground, through
:class:`PageSession`): Debian's ``chromium`` package, which ``make test``
installs when it can (tools/browser-tools.sh, as root with apt). Without it
the caller skips just the rendering part, and the run ends with one loud
line saying so (``tests/conftest.py`` counts the skips whose reason starts
with :data:`LOUD_SKIP_PREFIX`), so that a CI
machine that never renders a page does not look green by accident. The
flags keep it off this machine's closed network (see the env notes);
``--no-sandbox`` because the tests may run as root, where Chromium's sandbox
refuses to start.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_TIMEOUT_S = 60


MISSING_REASON = (
    f"no {CHROMIUM} (Debian package 'chromium'; tools/browser-tools.sh installs it as root): "
    "only the HTML structure is checked"
)
# The start of the reason of every skip for want of Chromium (or of Pyodide,
# for the playground). The summary line finds them by it among the run's
# skip reports, which reach the main process from pytest-xdist's workers too.
LOUD_SKIP_PREFIX = "browser part missing: "


def skip_loudly(reason: str) -> None:
    """Skip the calling test for want of a browser part, and say so in the
    run's summary line (``tests/conftest.py``)."""
    pytest.skip(LOUD_SKIP_PREFIX + reason)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on ``args`` with a fresh profile under
    ``tmp_path``; the finished process (its exit code is the caller's to
    judge). Skips the calling test when Chromium is not installed; fails it
    when Chromium runs past :data:`CHROMIUM_TIMEOUT_S`."""
    if not CHROMIUM.exists():
        skip_loudly(MISSING_REASON)
    profile = tmp_path / "chromium-profile"
    argv = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--hide-scrollbars", "--enable-logging=stderr", "--v=0", *args,
    ]  # fmt: skip
    env = dict(os.environ, HOME=str(tmp_path))
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT_S} s")


def console_errors(stderr: str) -> list[str]:
    """Uncaught script errors the page logged."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]


def _moved_above_4(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class PageSession:
    """A headless Chromium driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: JSON messages ending in NUL on fds 3
    and 4, no socket and no client library), for tests that must click,
    wait for a page's own script and read its state (the playground).

    ``evaluate`` runs an expression in the page (awaiting a promise) and
    returns its JSON value; ``screenshot`` writes a PNG. A context manager:
    the browser is ended on exit. Skips the calling test when Chromium is
    not installed (as :func:`chromium` does)."""

    def __init__(self, tmp_path: Path, *, width: int = 1400, height: int = 1000) -> None:
        if not CHROMIUM.exists():
            skip_loudly(MISSING_REASON)
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above fd 4, so that placing them on 3 and 4 in the child cannot
        # overwrite one with the other.
        to_browser_r, from_browser_w = _moved_above_4(to_browser_r), _moved_above_4(from_browser_w)

        def wire_fds() -> None:  # in the child: the protocol's fds 3 and 4
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        argv = [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--hide-scrollbars", "--remote-debugging-pipe",
            f"--window-size={width},{height}", "about:blank",
        ]  # fmt: skip
        self._stderr = open(tmp_path / "chromium-stderr.log", "wb")  # noqa: SIM115 - closed in close()
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=dict(os.environ, HOME=str(tmp_path)),
            preexec_fn=wire_fds,  # noqa: PLW1509 - tests start no threads around it
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.console: list[str] = []
        targets = self._call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self._call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Runtime.enable")
        self.call("Page.enable")

    @property
    def pid(self) -> int:
        """The browser's process id (its renderers are its descendants)."""
        return self._process.pid

    def __enter__(self) -> PageSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(timeout=CHROMIUM_TIMEOUT_S)
        self._stderr.close()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                pytest.fail("chromium did not answer within the deadline")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                pytest.fail("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _call(self, method: str, *, session: str | None = None, timeout_s: float = CHROMIUM_TIMEOUT_S, **params: object) -> dict:
        self._next_id += 1
        message: dict = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self._read_message(deadline)
            if answer.get("method") == "Runtime.exceptionThrown":
                details = answer["params"]["exceptionDetails"]
                self.console.append("Uncaught " + details.get("exception", {}).get("description", details.get("text", "")))
            elif answer.get("method") == "Runtime.consoleAPICalled":
                args = answer["params"]["args"]
                self.console.append(answer["params"]["type"] + ": " + " ".join(str(a.get("value", a.get("description", ""))) for a in args))
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    pytest.fail(f"DevTools {method}: {answer['error']}")
                return answer["result"]

    def call(self, method: str, *, timeout_s: float = CHROMIUM_TIMEOUT_S, **params: object) -> dict:
        """One DevTools command in the page's session; its result."""
        return self._call(method, session=self._session, timeout_s=timeout_s, **params)

    def evaluate(self, expression: str, *, timeout_s: float = CHROMIUM_TIMEOUT_S) -> object:
        """The JSON value of ``expression`` in the page (promises awaited);
        fails the test on an exception."""
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True, timeout_s=timeout_s
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            pytest.fail(f"page script failed: {details.get('exception', {}).get('description', details.get('text'))}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, *, timeout_s: float = CHROMIUM_TIMEOUT_S) -> object:
        """Poll ``expression`` in the page until it is truthy; its value.
        Fails the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(f"(function(){{try{{return {expression};}}catch(e){{return null;}}}})()")
            if value:
                return value
            time.sleep(0.1)  # polling a real browser process, not simulated time
        pytest.fail(f"the page never satisfied {expression!r} within {timeout_s} s")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path
