"""Real MCP servers for the MCP tests: the Python reference servers from the registry
(mcp-server-time, mcp-server-git) and @modelcontextprotocol/server-everything from npm,
which .ci/mcp-servers.sh installs into a cache directory outside the checkout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = Path(
    os.environ.get("ART_TEST_MCP_NODE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "art" / "mcp-node"
)
EVERYTHING = NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything"
#: The art agent the server tests serve (`art mcp --instance`).
APP = ROOT / "tests" / "mcp_app.py"
#: An SDK MCP server reporting the headers and cancellations it received.
PROBE = ROOT / "tests" / "mcp_probe.py"


def time_server() -> dict[str, object]:
    """The `mcpServers` entry of the reference time server (UTC as local time)."""
    return {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def git_server() -> dict[str, object]:
    return {"command": sys.executable, "args": ["-m", "mcp_server_git"]}


def everything_server() -> dict[str, object]:
    """The `mcpServers` entry of server-everything over stdio (the test fails or skips
    when it is not installed)."""
    require_everything()
    return {"command": str(EVERYTHING), "args": ["stdio"]}


def require_everything() -> None:
    """Fail (under CI=true, which must run it) or skip when server-everything is missing."""
    if EVERYTHING.exists():
        return
    message = (
        f"@modelcontextprotocol/server-everything is not installed in {NODE_DIR}; "
        "install it with: bash .ci/mcp-servers.sh"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def run_everything(mode: str) -> Iterator[str]:
    """server-everything in `mode` (streamableHttp or sse) on a free port: its base URL."""
    require_everything()
    port = free_port()
    yield from _run_http([str(EVERYTHING), mode], port, {**os.environ, "PORT": str(port)})


def run_probe(transport: str) -> Iterator[str]:
    """tests/mcp_probe.py over `transport` (streamable-http or sse) on a free port: its base URL."""
    port = free_port()
    yield from _run_http([sys.executable, str(PROBE), transport, str(port)], port)


def _run_http(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def child_pids(parent: int | None = None) -> set[int]:
    """The processes whose parent is `parent` (default: this one), from /proc."""
    parent = os.getpid() if parent is None else parent
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            found.add(int(entry))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def mcp_children(marker: str) -> set[int]:
    """This process's children whose command line contains `marker`."""
    return {pid for pid in child_pids() if marker in command_line(pid)}
