#!/usr/bin/env python3
"""Opens one page in headless Chromium at one window width and reports what a browser saw, as JSON.

    scripts/browser-check.py --url URL --width 390 --height 844 [--header 'Name: value']...
                             [--evaluate JS] [--screenshot OUT.png [--max-height PX]] [--chromium PATH] [--timeout SECONDS]

Drives Debian's `chromium` over the DevTools protocol on a pipe (--remote-debugging-pipe: commands on the
child's fd 3, answers and events on its fd 4, each message JSON ended by a NUL byte), with nothing but the
standard library. It prints one JSON object on standard output:

    {"url", "width", "height",
     "console":    console messages of level warning or error, exceptions, and browser log entries
                   (failed loads, CSP violations) of level warning or error,
     "requests":   every URL the page requested, the page itself included,
     "evaluated":  the value of --evaluate (an expression run in the page once it has loaded), or null,
     "screenshot": the PNG's path, or null}

Exit status: 0 when the page loaded (whatever it contained: the caller judges), 1 when Chromium could not
be started or the page did not load within the timeout, 2 on a usage error. Only the caller's files are
written; Chromium's profile lives in a temporary directory removed afterwards.
"""

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    """A headless Chromium child and the pipe to its DevTools endpoint."""

    def __init__(self, executable, width, height, deadline):
        self.deadline = deadline
        self.profile = tempfile.mkdtemp(prefix="baton-chromium-")
        to_child_read, self.to_child = os.pipe()
        self.from_child, from_child_write = os.pipe()
        # The child reads commands on fd 3 and writes answers on fd 4: move our ends there before exec.
        # (Through descriptors above 9 first, in case the pipe's own ends are 3 or 4.)
        def place_fds():
            read_end = fcntl.fcntl(to_child_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_child_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
        self.process = subprocess.Popen(
            [executable, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
             "--force-color-profile=srgb", "--font-render-hinting=none",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=place_fds, pass_fds=(3, 4))
        os.close(to_child_read)
        os.close(from_child_write)
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def close(self):
        try:
            self.send("Browser.close", wait=False)
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method, params=None, session=None, wait=True):
        """Sends a command; with `wait`, returns its result and keeps the events read meanwhile."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_child, json.dumps(message).encode() + b"\0")
        if not wait:
            return None
        while True:
            answer = self.read()
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})
            if "method" in answer:
                self.events.append(answer)

    def read(self, until=None):
        """The next message, or None when `until` (a monotonic time) passes first."""
        while b"\0" not in self.buffer:
            limit = min(self.deadline, until) if until else self.deadline
            remaining = limit - time.monotonic()
            if remaining <= 0:
                if until and until < self.deadline:
                    return None
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self.from_child], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe: "
                                   + self.process.stderr.read().decode(errors="replace")[-2000:])
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method, session, until):
        """Reads events until `method` arrives on `session` (True) or `until` passes (False)."""
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return True
        while True:
            message = self.read(until)
            if message is None:
                return False
            if "method" in message:
                self.events.append(message)
                if message["method"] == method and message.get("sessionId") == session:
                    return True

    def drain(self, seconds):
        """Keeps reading events for `seconds` (late requests, late console messages)."""
        until = time.monotonic() + seconds
        while True:
            message = self.read(until)
            if message is None:
                return
            if "method" in message:
                self.events.append(message)


def run(arguments):
    deadline = time.monotonic() + arguments.timeout
    browser = Browser(arguments.chromium, arguments.width, arguments.height, deadline)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {
            "width": arguments.width, "height": arguments.height, "deviceScaleFactor": 1,
            "mobile": arguments.width < 600}, session=session)
        headers = dict(header.split(": ", 1) for header in arguments.header)
        if headers:
            browser.send("Network.setExtraHTTPHeaders", {"headers": headers}, session=session)
        browser.events.clear()
        navigation = browser.send("Page.navigate", {"url": arguments.url}, session=session)
        if navigation.get("errorText"):
            raise RuntimeError(f"navigation failed: {navigation['errorText']}")
        if not browser.wait_for("Page.loadEventFired", session, deadline):
            raise TimeoutError("the page did not finish loading")
        browser.drain(0.5)

        evaluated = None
        if arguments.evaluate:
            answer = browser.send("Runtime.evaluate", {"expression": arguments.evaluate, "returnByValue": True},
                                  session=session)
            if "exceptionDetails" in answer:
                raise RuntimeError("the expression threw: " + json.dumps(answer["exceptionDetails"])[:2000])
            evaluated = answer["result"].get("value")

        screenshot = None
        if arguments.screenshot:
            size = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            height = min(size["height"], arguments.max_height) if arguments.max_height else size["height"]
            shot = browser.send("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": arguments.width, "height": height, "scale": 1}},
                session=session)
            with open(arguments.screenshot, "wb") as file:
                file.write(base64.b64decode(shot["data"]))
            screenshot = arguments.screenshot
        browser.drain(0.2)

        console, requests = [], []
        for event in browser.events:
            if event.get("sessionId") != session:
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                text = " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
                console.append(f"console.{params['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                console.append("exception: " + details.get("exception", {}).get("description", details.get("text", "")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                entry = params["entry"]
                console.append(f"{entry.get('source')} {entry['level']}: {entry.get('text')} {entry.get('url', '')}".strip())
            elif method == "Network.requestWillBeSent":
                requests.append(params["request"]["url"])
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                console.append(f"network error: {params.get('errorText')} ({params.get('blockedReason', '')})")
        return {"url": arguments.url, "width": arguments.width, "height": arguments.height,
                "console": console, "requests": requests, "evaluated": evaluated, "screenshot": screenshot}
    finally:
        browser.close()


def main():
    parser = argparse.ArgumentParser(description="Open a page in headless Chromium and report what it saw.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--header", action="append", default=[], help="an extra request header, 'Name: value'")
    parser.add_argument("--evaluate", help="a JavaScript expression to evaluate once the page has loaded")
    parser.add_argument("--screenshot", help="write a full-page PNG here")
    parser.add_argument("--max-height", type=int, help="cut the screenshot at this many pixels from the top")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--timeout", type=float, default=60)
    arguments = parser.parse_args()
    if not os.access(arguments.chromium, os.X_OK):
        print(f"browser-check: Chromium not found at {arguments.chromium}: run scripts/install-deps.sh", file=sys.stderr)
        sys.exit(1)
    try:
        result = run(arguments)
    except (RuntimeError, TimeoutError, OSError) as error:
        print(f"browser-check: {error}", file=sys.stderr)
        sys.exit(1)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
