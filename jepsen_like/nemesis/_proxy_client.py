"""Clients of the proxy's control socket: ``ProxyClient`` (blocking,
thread-safe; also starts and stops the proxy process) and
``AsyncProxyClient`` (trio)."""

from __future__ import annotations

import abc

import itertools
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import trio

from ._errors import ProxyCommandError, ProxyError

PROXY_READY_TIMEOUT_S = 20.0
PROXY_STOP_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 10.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _request_line(request_id: int, op: str, args: dict[str, Any]) -> bytes:
    return json.dumps({"id": request_id, "op": op, "args": args}).encode() + b"\n"


def _result_of(answer: dict[str, Any], request_id: int, op: str) -> Any:
    if answer.get("id") != request_id:
        raise ProxyError(f"proxy answered request {answer.get('id')} to request {request_id} ({op})")
    if not answer.get("ok"):
        raise ProxyCommandError(f"proxy refused {op}: {answer.get('error')}", kind=str(answer.get("kind", "Error")))
    return answer.get("result")


class _Commands(abc.ABC):
    """The command set, written once over ``request``."""

    @abc.abstractmethod
    def request(self, op: str, **args: Any) -> Any:
        """Send one command; its result."""

    def add_link(self, name: str, listen_port: int, target_host: str, target_port: int) -> int:
        """Listen on ``listen_port`` (0: pick a free port) and forward each
        connection to ``target_host:target_port``; returns the port.

        Raises ``ProxyCommandError`` for a duplicate name or a port that
        cannot be bound, ``ProxyError`` when the proxy does not answer."""
        return int(self.request("add_link", name=name, listen_port=listen_port, target_host=target_host, target_port=target_port))

    def set_link(self, name: str, mode: str) -> None:
        """Set a link's mode: ``pass``, ``drop``, ``refuse``,
        ``one-way-a-to-b`` (a→b cut) or ``one-way-b-to-a`` (b→a cut).

        Raises ``ProxyCommandError`` for an unknown link or mode."""
        self.request("set_link", name=name, mode=str(mode))

    def set_delay(self, name: str, delay_ms: float, jitter_ms: float = 0.0, direction: str = "both") -> None:
        """Delay each forwarded chunk by ``delay_ms`` + uniform[0,
        ``jitter_ms``] in ``direction`` (``a-to-b``, ``b-to-a``, ``both``).

        Raises ``ProxyCommandError`` for an unknown link or a bad value."""
        self.request("set_delay", name=name, delay_ms=delay_ms, jitter_ms=jitter_ms, direction=str(direction))

    def apply(self, links: dict[str, dict[str, Any]]) -> None:
        """Change several links in one step (see ``ProxyServer.apply``).

        Raises ``ProxyCommandError`` (and changes nothing) when any entry is bad."""
        self.request("apply", links=links)

    def heal_all(self) -> None:
        """Every link back to ``pass``, no delay."""
        self.request("heal_all")

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per link: mode, port, bytes forwarded each way, connections."""
        return dict(self.request("stats"))

    def link_modes(self) -> dict[str, str]:
        """Link name → mode, as the proxy has it now."""
        return {name: entry["mode"] for name, entry in self.stats().items()}

    def ping(self) -> None:
        """Raises ``ProxyError`` unless the proxy answers."""
        self.request("ping")


class ProxyClient(_Commands):
    """A blocking, thread-safe client of one proxy's control socket.

    ``ProxyClient.start()`` starts a proxy process and returns a client
    that owns it; ``stop()`` (or leaving the ``with`` block) shuts it down.
    From trio, call the methods through ``trio.to_thread.run_sync``."""

    def __init__(
        self,
        control_address: tuple[str, int],
        *,
        process: subprocess.Popen[bytes] | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """Connect to a proxy's control socket.

        Raises ``ProxyError`` when it cannot connect."""
        self.control_address = control_address
        self.process = process
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending = b""
        try:
            self._sock: socket.socket | None = socket.create_connection(control_address, timeout=timeout_s)
        except OSError as error:
            host, port = control_address
            raise ProxyError(f"cannot reach the proxy control socket at {host}:{port}: {error}") from error

    @classmethod
    def start(
        cls,
        *,
        control_host: str = "127.0.0.1",
        link_host: str = "127.0.0.1",
        seed: int = 0,
        stderr: str | os.PathLike[str] | None = None,
        ready_timeout_s: float = PROXY_READY_TIMEOUT_S,
        python: str | None = None,
    ) -> ProxyClient:
        """Start ``python -m jepsen_like.nemesis.proxy`` and connect to it.

        The proxy runs in its own session (a Ctrl-C at the terminal reaches
        the harness, whose cleanup stops the proxy in order) and exits when
        the harness dies, through ``--exit-with-stdin``. ``stderr`` is a
        file to append the proxy's log to (default: inherited).

        Raises ``ProxyError`` when the proxy does not report ready within
        ``ready_timeout_s``."""
        argv = [
            python or sys.executable,
            "-m",
            "jepsen_like.nemesis.proxy",
            "--control",
            f"{control_host}:0",
            "--link-host",
            link_host,
            "--seed",
            str(seed),
            "--exit-with-stdin",
        ]
        env = dict(os.environ)
        # The proxy must run this very code, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        log: IO[bytes] | None = open(stderr, "ab") if stderr is not None else None  # noqa: SIM115 - the child holds it
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True
            )
        finally:
            if log is not None:
                log.close()
        try:
            assert process.stdout is not None
            line = _read_line(process, ready_timeout_s)
            ready = json.loads(line)
            port = int(ready["control_port"])
        except (ProxyError, ValueError, KeyError) as error:
            _kill(process)
            raise ProxyError(f"the proxy process did not start: {error}") from error
        finally:
            if process.stdout is not None:
                process.stdout.close()  # it prints nothing after the ready line
        try:
            return cls((control_host, port), process=process)
        except ProxyError:
            _kill(process)
            raise

    def request(self, op: str, **args: Any) -> Any:
        """Send one command and return its result.

        Raises ``ProxyCommandError`` when the proxy refuses it and
        ``ProxyError`` when the proxy is gone or does not answer in time."""
        with self._lock:
            if self._sock is None:
                raise ProxyError("the proxy client is closed")
            request_id = next(self._ids)
            try:
                self._sock.sendall(_request_line(request_id, op, args))
                line = self._receive_line()
            except OSError as error:
                raise ProxyError(f"the proxy stopped answering ({op}): {error}{self._exit_note()}") from error
        return _result_of(json.loads(line), request_id, op)

    def _receive_line(self) -> bytes:
        assert self._sock is not None
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._pending:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise TimeoutError(f"no answer within {self.timeout_s} s")
            self._sock.settimeout(remaining_s)
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionResetError("the proxy closed the control connection")
            self._pending += data
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def _exit_note(self) -> str:
        if self.process is not None and self.process.poll() is not None:
            return f" (the proxy process exited with {self.process.returncode})"
        return ""

    def shutdown(self) -> None:
        """Ask the proxy to exit (it answers first). Raises ``ProxyError``
        when it cannot be asked."""
        self.request("shutdown")

    def close(self) -> None:
        """Close the control connection; the proxy keeps running."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def stop(self, timeout_s: float = PROXY_STOP_TIMEOUT_S) -> None:
        """Shut the proxy down and, if this client started it, wait for the
        process to exit (killing it after ``timeout_s``). Safe to call more
        than once, and after the proxy has died."""
        try:
            if self._sock is not None:
                self.shutdown()
        except ProxyError:
            pass  # already gone: the process handling below still applies
        self.close()
        process = self.process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.closed:
            try:
                process.stdin.close()  # --exit-with-stdin: a second way out
            except OSError:
                pass
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(process)

    def __enter__(self) -> ProxyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _read_line(process: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """One line from the process's stdout within ``timeout_s``; raises
    ``ProxyError`` on timeout or exit."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise ProxyError(f"no ready line within {timeout_s} s")
        readable, _, _ = select.select([fd], [], [], remaining_s)
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            process.wait(timeout=PROXY_STOP_TIMEOUT_S)
            raise ProxyError(f"it exited with {process.returncode} before it was ready (see its stderr)")
        data += chunk
    return data.partition(b"\n")[0]


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    try:
        process.wait(timeout=PROXY_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # unkillable (D state); nothing more we can do
    if process.stdin is not None and not process.stdin.closed:
        process.stdin.close()


class AsyncProxyClient:
    """A trio client of a proxy's control socket (one request at a time)."""

    def __init__(self, stream: trio.SocketStream, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._stream = stream
        self._lock = trio.Lock()
        self._ids = itertools.count(1)
        self._pending = b""
        self.timeout_s = timeout_s

    @classmethod
    async def connect(cls, host: str, port: int, *, timeout_s: float = REQUEST_TIMEOUT_S) -> AsyncProxyClient:
        """Raises ``ProxyError`` when the control socket cannot be reached."""
        try:
            with trio.fail_after(timeout_s):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError) as error:
            raise ProxyError(f"cannot reach the proxy control socket at {host}:{port}: {error}") from error
        return cls(stream, timeout_s)

    async def request(self, op: str, **args: Any) -> Any:
        """Raises ``ProxyCommandError`` when the proxy refuses the command,
        ``ProxyError`` when it is gone or slower than ``timeout_s``."""
        async with self._lock:
            request_id = next(self._ids)
            try:
                with trio.fail_after(self.timeout_s):
                    await self._stream.send_all(_request_line(request_id, op, args))
                    while b"\n" not in self._pending:
                        data = await self._stream.receive_some(65536)
                        if not data:
                            raise trio.BrokenResourceError("the proxy closed the control connection")
                        self._pending += data
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError) as error:
                raise ProxyError(f"the proxy stopped answering ({op}): {error!r}") from error
            line, _, self._pending = self._pending.partition(b"\n")
        return _result_of(json.loads(line), request_id, op)

    async def add_link(self, name: str, listen_port: int, target_host: str, target_port: int) -> int:
        """See ``ProxyClient.add_link``."""
        return int(
            await self.request("add_link", name=name, listen_port=listen_port, target_host=target_host, target_port=target_port)
        )

    async def set_link(self, name: str, mode: str) -> None:
        """See ``ProxyClient.set_link``."""
        await self.request("set_link", name=name, mode=str(mode))

    async def set_delay(self, name: str, delay_ms: float, jitter_ms: float = 0.0, direction: str = "both") -> None:
        """See ``ProxyClient.set_delay``."""
        await self.request("set_delay", name=name, delay_ms=delay_ms, jitter_ms=jitter_ms, direction=str(direction))

    async def apply(self, links: dict[str, dict[str, Any]]) -> None:
        """See ``ProxyClient.apply``."""
        await self.request("apply", links=links)

    async def heal_all(self) -> None:
        await self.request("heal_all")

    async def stats(self) -> dict[str, dict[str, Any]]:
        return dict(await self.request("stats"))

    async def link_modes(self) -> dict[str, str]:
        return {name: entry["mode"] for name, entry in (await self.stats()).items()}

    async def shutdown(self) -> None:
        """Ask the proxy to exit; raises ``ProxyError`` when it cannot be asked."""
        await self.request("shutdown")

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> AsyncProxyClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
