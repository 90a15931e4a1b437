"""Headless Chromium driven by the DevTools protocol over a pipe, for the browser test of the HTML report.

Why a pipe (``--remote-debugging-pipe``) and no client library: Playwright would be a new dependency that
cannot fetch its own browsers here, and a websocket client (``websockets`` comes with Dagster, not with
this project) needs a debugging port. Over the pipe Chromium reads NUL-terminated JSON commands on fd 3
and writes replies and events on fd 4: the standard library is enough and no port is opened.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

# Without the background-networking flags Chromium tries to reach Google's services, which a closed
# network answers with long timeouts; a fresh profile keeps runs independent.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 20.0


def find_chromium() -> str | None:
    """``/usr/bin/chromium`` (Debian's package), else a ``chromium`` on PATH; None when there is none."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


class Chromium:
    """One browser process; :meth:`open` loads a page in a new tab of a given width."""

    def __init__(self, executable: str) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="ragspine-chromium-")
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()
        # Chromium wants its ends on fds 3 and 4: move them above 10 first, so dup2 cannot clobber one.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
        for fd in (to_browser, from_browser):
            os.close(fd)

        def child_fds() -> None:
            os.dup2(ends[0], 3)
            os.dup2(ends[1], 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=child_fds,
        )
        for fd in ends:
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):  # it may be gone already
            self.send("Browser.close")
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._read, self._write):
            os.close(fd)
        self._profile.cleanup()

    # -- protocol --------------------------------------------------------------------------------

    def send(self, method: str, session: str | None = None, **params: object) -> dict:
        """Send one command and return its result; raises RuntimeError on a protocol error."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        """The first event ``method`` of ``session`` not yet consumed."""
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._receive())

    def _receive(self) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError(f"Chromium did not answer within {TIMEOUT_S:g} s")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    # -- pages -----------------------------------------------------------------------------------

    def open(self, path: Path, width: int, height: int = 900) -> Page:
        """``path`` loaded in a new tab whose viewport is ``width`` CSS pixels wide."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable", session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.send("Page.navigate", session, url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session)


class Page:
    def __init__(self, browser: Chromium, session: str) -> None:
        self._browser, self._session = browser, session

    def evaluate(self, expression: str) -> object:
        """The value of a JavaScript expression (JSON-serialisable); raises on a script error."""
        result = self._browser.send(
            "Runtime.evaluate", self._session, expression=expression, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, out: Path, top: float = 0, height: float | None = None) -> Path:
        """A PNG of the page from ``top`` down ``height`` CSS pixels (default: to the end of the page)."""
        size = self._browser.send("Page.getLayoutMetrics", self._session)["cssContentSize"]
        clip = {
            "x": 0,
            "y": top,
            "width": size["width"],
            "height": min(height or size["height"], size["height"] - top),
            "scale": 1,
        }
        shot = self._browser.send(
            "Page.captureScreenshot", self._session, format="png", clip=clip, captureBeyondViewport=True
        )
        out.write_bytes(base64.b64decode(shot["data"]))
        return out
