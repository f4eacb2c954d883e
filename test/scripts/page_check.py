#!/usr/bin/env python3
"""Drive the server's chat page (serve/page.c) in headless Chromium.

Chromium runs in its own headless mode and is driven through the DevTools
protocol over --remote-debugging-pipe (JSON messages ending in NUL on file
descriptors 3 and 4), so nothing beyond the standard library is needed: no
websocket client, no Selenium.  For each message given, the script types it
into the page's text box and presses Enter, as a person would, then watches
the answer's element fill while the reply streams in, until the page's usage
note ("... generated") appears.  At the end it saves a PNG screenshot.

Prints one JSON object: {"turns": [{"answer", "partials", "polled",
"note"}...], "screenshot": bytes}.  "partials" counts the distinct non-empty
texts the answer element held before its last (a MutationObserver records
every one; each must grow the one before): a page that waited for the whole
answer has none.  "polled" counts those a viewer polling every ~10 ms saw.
The page is 900 x 700 CSS pixels at scale 1, so the screenshot is too.

Usage: page_check.py [--chromium PATH] URL SHOT.png MESSAGE [MESSAGE ...]
Exit status: 0 done, 1 a check or a timeout failed (said on stderr),
2 Chromium not found.
"""
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

TIMEOUT = 150.0  # seconds for the whole run (a loaded 2-core box is slow)


class Browser:
    """A Chromium child process and its DevTools pipe."""

    def __init__(self, exe, profile):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def child_fds():
            # Chromium reads commands on fd 3 and writes replies on fd 4.
            a = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-dev-shm-usage", "--window-size=900,700",
                "--user-data-dir=" + profile, "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses root otherwise (CI)
        self.proc = subprocess.Popen(args, preexec_fn=child_fds, close_fds=False,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(profile, "chromium.log"), "wb"))
        os.close(to_r)
        os.close(from_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None
        self.deadline = time.monotonic() + TIMEOUT

    def _read_message(self, until):
        while b"\0" not in self.buf:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from Chromium")
            r, _, _ = select.select([self.from_r], [], [], left)
            if r:
                chunk = os.read(self.from_r, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed its DevTools pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, browser=False):
        """Send a command (to the page's session unless browser) and wait for its reply."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read_message(self.deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method):
        while True:
            for i, m in enumerate(self.events):
                if m["method"] == method:
                    return self.events.pop(i)
            self.events.append(self._read_message(self.deadline))

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close", browser=True)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def key(b, kind, **kw):
    b.call("Input.dispatchKeyEvent", dict(type=kind, **kw))


# Every text the page gives an answer element, in order: the page replaces
# the element's text node on each streamed event, and a MutationObserver
# keeps each added node, so no update is missed however fast tokens come.
OBSERVE = """window.__texts = [];
new MutationObserver((rs) => {
  for (const r of rs)
    if (r.target.classList && r.target.classList.contains('assistant'))
      for (const n of r.addedNodes) if (n.nodeType === 3) window.__texts.push(n.data);
}).observe(document.getElementById('log'), {childList: true, subtree: true});"""


def one_turn(b, text):
    notes = b.eval("document.querySelectorAll('.note').length")
    answers = b.eval("document.querySelectorAll('.assistant').length")
    b.eval("window.__texts = []; document.getElementById('t').focus()")
    b.call("Input.insertText", {"text": text})
    enter = dict(key="Enter", code="Enter", windowsVirtualKeyCode=13,
                 nativeVirtualKeyCode=13)
    key(b, "keyDown", text="\r", **enter)
    key(b, "keyUp", **enter)
    polled = []  # what a viewer would have seen, polling every ~10 ms
    while True:
        if time.monotonic() > b.deadline:
            raise TimeoutError(f"no finished answer to {text!r}; seen {polled[-1:]}")
        st = b.eval("""(() => {
            const a = document.querySelectorAll('.assistant'),
                  n = document.querySelectorAll('.note');
            return {answers: a.length, text: a.length ? a[a.length - 1].textContent : '',
                    notes: n.length, note: n.length ? n[n.length - 1].textContent : ''};
        })()""")
        if st["answers"] > answers and st["text"] and (not polled or polled[-1] != st["text"]):
            polled.append(st["text"])
        if st["notes"] > notes:
            break
        time.sleep(0.01)
    if "generated" not in st["note"]:
        raise RuntimeError(f"the page said {st['note']!r} instead of an answer")
    final = st["text"]
    if st["answers"] != answers + 1 or not final:
        raise RuntimeError(f"no answer element filled for {text!r}")
    texts = [t for t in b.eval("window.__texts") if t]
    if not texts or texts[-1] != final:
        raise RuntimeError(f"the observed texts {texts[-3:]} do not end in {final!r}")
    for a, c in zip(texts, texts[1:]):
        if not c.startswith(a):
            raise RuntimeError(f"the answer went from {a!r} to {c!r}: not by growing")
    return {"answer": final, "partials": len(set(texts)) - 1,
            "polled": len([t for t in polled if t != final]), "note": st["note"]}


def main():
    argv = sys.argv[1:]
    exe = None
    if len(argv) >= 2 and argv[0] == "--chromium":
        exe, argv = argv[1], argv[2:]
    if len(argv) < 3:
        sys.exit(__doc__)
    url, shot, messages = argv[0], argv[1], argv[2:]
    exe = exe or next((shutil.which(n) for n in ("chromium", "chromium-browser",
                                                 "google-chrome") if shutil.which(n)), None)
    if not exe:
        print("page_check.py: no chromium on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="page-check-") as profile:
        b = Browser(exe, profile)
        try:
            targets = b.call("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            b.session = b.call("Target.attachToTarget",
                               {"targetId": page["targetId"], "flatten": True})["sessionId"]
            b.call("Page.enable")
            b.call("Emulation.setDeviceMetricsOverride",
                   {"width": 900, "height": 700, "deviceScaleFactor": 1, "mobile": False})
            b.call("Page.navigate", {"url": url})
            b.wait_event("Page.loadEventFired")
            if b.eval("document.title") != "strata chat":
                raise RuntimeError("the page at " + url + " is not the chat page")
            b.eval(OBSERVE)
            turns = [one_turn(b, m) for m in messages]
            png = base64.b64decode(b.call("Page.captureScreenshot", {"format": "png"})["data"])
            with open(shot, "wb") as f:
                f.write(png)
            print(json.dumps({"turns": turns, "screenshot": len(png)}))
            return 0
        except Exception as e:  # one line on stderr for the C test's message
            log = ""
            try:
                with open(os.path.join(profile, "chromium.log"), errors="replace") as f:
                    log = f.read()[-2000:]
            except OSError:
                pass
            print(f"page_check.py: {type(e).__name__}: {e}\n{log}", file=sys.stderr)
            return 1
        finally:
            b.close()


if __name__ == "__main__":
    sys.exit(main())
