"""A small client of Chromium's DevTools protocol over --remote-debugging-pipe (fd 3: commands in, fd 4:
replies and events out, each message JSON ending in a NUL byte): enough to open a page in headless
Chromium, run JavaScript in it and in its frames, and take screenshots. Standard library only; the browser
is Debian's `chromium` package."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(RuntimeError):
    pass


class Chromium:
    """One headless browser; `open(url)` gives a Page."""

    def __init__(self, exe: str, profile: Path, width: int = 1400, height: int = 1000):
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        # above fd 4, so that moving them to 3 and 4 cannot close one another
        (cmd_r, out_w), low = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, out_w)], (cmd_r, out_w)
        for fd in low:
            os.close(fd)
        args = [exe, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                f"--user-data-dir={profile}", f"--window-size={width},{height}",
                "--hide-scrollbars",
                # the report shows tables in iframes with data: URLs; one process, so their frames can be read
                "--disable-features=IsolateOrigins,site-per-process", "--disable-site-isolation-trials",
                "about:blank"]
        # the browser expects the pipe at fds 3 and 4: bash puts them there (sh takes one-digit fds only)
        shell = f'exec "$0" "$@" 3<&{cmd_r} 4>&{out_w} {cmd_r}<&- {out_w}>&-'
        self.log = open(profile / "chromium.log", "wb")
        self.proc = subprocess.Popen(["bash", "-c", shell, *args], pass_fds=(cmd_r, out_w),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        os.close(cmd_r)
        os.close(out_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    # -- the wire
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from Chromium")
            ready, _, _ = select.select([self._out_r], [], [], left)
            if ready:
                chunk = os.read(self._out_r, 1 << 20)
                if not chunk:
                    raise ProtocolError(f"Chromium closed the pipe (exit {self.proc.poll()}); see {self.log.name}")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise ProtocolError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def open(self, url: str) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Page.navigate", {"url": url})
        return page

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._out_r)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict | None = None, timeout: float = 30):
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def eval(self, expression: str, context: int | None = None, timeout: float = 30):
        """The value of a JavaScript expression (awaited if it is a promise); a thrown error raises."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if context is not None:
            params["contextId"] = context
        r = self.send("Runtime.evaluate", params, timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise ProtocolError(f"JavaScript error: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30, what: str = ""):
        """Polls a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what or expression}")
            time.sleep(0.1)

    def frames(self) -> list[dict]:
        """Every frame of the page below the main one (Page.getFrameTree), as {id, url}."""
        out = []

        def walk(node):
            for child in node.get("childFrames", []):
                out.append(child["frame"])
                walk(child)
        walk(self.send("Page.getFrameTree")["frameTree"])
        return out

    def frame_context(self, frame_id: str) -> int:
        """An execution context in a frame (an isolated world: it sees the frame's DOM, not its scripts)."""
        return self.send("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": "check"})["executionContextId"]

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"}, timeout=60)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
