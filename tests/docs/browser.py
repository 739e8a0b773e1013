"""A real headless Chromium driven through the DevTools protocol: load a page, wait until it is
drawn, and report its visible text, a screenshot and every console error.

The protocol, rather than ``--dump-dom`` and a grep of Chromium's log, because the log prints
every console message at one level and says nothing of a resource that failed to load; the
protocol reports each with its level (``Runtime.exceptionThrown``, ``Runtime.consoleAPICalled``
and ``Log.entryAdded``, which carries network failures).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect


@dataclass
class Page:
    """What a page showed: its visible text, its screenshot (PNG) and its console errors."""

    text: str
    png: bytes
    errors: list[str] = field(default_factory=list)


class _Session:
    """One DevTools connection to a tab: commands answered in order, events collected."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def drain(self, seconds: float) -> None:
        """Collect the events that arrive within ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.events.append(json.loads(self.socket.recv(timeout=left)))
            except TimeoutError:
                return

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(details.get("exception", {}).get("description") or details["text"])
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                found.append(f"{entry['text']} ({entry.get('url', '')})")
        return found


def chromium() -> str | None:
    """The Chromium of Debian's ``chromium`` package, if installed."""
    return shutil.which("chromium")


@contextmanager
def browser(executable: str) -> Iterator[str]:
    """A headless Chromium; yields the DevTools WebSocket URL of its first tab."""
    profile = tempfile.mkdtemp(prefix="octr-chromium-")
    process = subprocess.Popen(
        [
            executable,
            "--headless",
            "--no-sandbox",  # the tests may run as root, where the sandbox cannot start
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1280,900",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its helper processes too are stopped at the end
    )
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
            assert process.poll() is None, f"Chromium exited with {process.returncode}"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        tabs = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        yield next(t["webSocketDebuggerUrl"] for t in tabs if t["type"] == "page")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(15)
        remove_profile(profile)


def remove_profile(profile: str) -> None:
    """Delete Chromium's profile directory. A helper process that outlives the browser's may
    still write to it for a moment ("Directory not empty" failed a full run): try again for
    up to 5 s, then once more, letting an error through."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            shutil.rmtree(profile)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    shutil.rmtree(profile)


def load(tab: str, url: str, ready: str, settle_s: float = 1.0) -> Page:
    """Open ``url`` in the tab and wait until its text contains ``ready`` (or 30 s)."""
    with connect(tab, max_size=None, open_timeout=30) as socket:
        session = _Session(socket)
        for domain in ("Page", "Runtime", "Log"):
            session.call(f"{domain}.enable")
        session.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline:
            found = session.call("Runtime.evaluate", expression="document.body?.innerText ?? ''")
            text = str(found["result"].get("value", ""))
            if ready in text:
                break
            session.drain(0.2)
        session.drain(settle_s)  # late errors: a script or a font that fails after the text
        shot = session.call("Page.captureScreenshot", format="png")
        return Page(text, base64.b64decode(shot["data"]), session.errors())
