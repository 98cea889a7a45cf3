"""Open every HTML page of a built Jupyter Book in headless Chromium and fail on a broken page.

Usage: ``python tools/check_site.py [SITE_DIR]`` (default ``_build/html``); ``make check-site``.

For each page (``**/*.html`` outside ``_static/``, ``_sources/``, ``_images/``) a fresh headless
Chromium (fresh ``--user-data-dir``) opens it over ``file://``, driven through the DevTools
protocol on ``--remote-debugging-pipe``. A page FAILS when

(a) an Altair / vega-embed chart is not drawn: the expected charts are counted from the page
    *source* (``<div id="altair-viz-...">`` containers and ``vegaEmbed("#id", ...)`` targets);
    in the live DOM each must hold a ``role="graphics-document"`` view with ``mark-*`` groups
    (or a non-empty canvas) and no error message;
(b) the page requests anything outside the built site. Two records are kept: every request the
    page makes (DevTools ``Network.requestWillBeSent``, file:// included), which must be a
    ``file://`` URL under SITE_DIR (or ``data:``/``blob:``/``about:``); and Chromium's own
    ``--log-net-log``, in which any network request started on behalf of a page (initiator other
    than the browser itself, so workers are covered too) is a failure. A ``file://`` resource of
    the site that fails to load is reported as well;
(c) a notebook output on the page shows an error (myst-nb ``output traceback`` blocks, nbsphinx
    ``output_error``, ``ename``, or a Python ``Traceback (most recent call last)`` in a cell
    output);
(d) an uncaught JavaScript exception is thrown on the page.

Exit status 0 when every page passes, 1 with one line per problem otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SKIP_DIRS = {"_static", "_sources", "_images", "_downloads"}

# Flags from shared/notes/toolchain.md, plus a pipe for the DevTools protocol and a net log.
BASE_FLAGS = [
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
]

ALTAIR_CONTAINER = re.compile(r"""<div[^>]*\bid=["'](altair-viz-[0-9A-Za-z_-]+)["']""")
EMBED_TARGET = re.compile(r"""vegaEmbed\(\s*["']#([A-Za-z][\w:.-]*)["']""")

DOM_PROBE = r"""
(() => {
  const ids = %IDS%;
  const out = {charts: {}, errors: [], documents: 0};
  for (const id of ids) {
    const el = document.getElementById(id);
    if (!el) { out.charts[id] = "missing: no element with this id in the DOM"; continue; }
    const err = el.querySelector(".error");
    const view = el.querySelector('[role="graphics-document"]');
    const marks = el.querySelectorAll('[class*="mark-"]').length;
    const canvas = el.querySelector("canvas");
    const painted = canvas && canvas.width > 0 && canvas.height > 0;
    if (err) out.charts[id] = "error: " + err.textContent.trim().slice(0, 300);
    else if (view && (marks > 0 || painted)) out.charts[id] = "drawn";
    else out.charts[id] = "pending";
  }
  out.documents = document.querySelectorAll('[role="graphics-document"]').length;
  const seen = new Set();
  const sel = [".output.traceback", ".output_error", ".ename", ".evalue",
               ".cell_output .traceback", "[class*='output_error']"].join(",");
  for (const el of document.querySelectorAll(sel)) {
    const last = el.textContent.trim().split("\n").filter(l => l.trim()).pop() || "";
    seen.add(last.trim().slice(0, 200));
  }
  for (const el of document.querySelectorAll(".cell_output, .output_area, .output")) {
    if (el.matches(sel) || el.querySelector(sel) || el.closest(sel)) continue;
    if (/Traceback \(most recent call last\)/.test(el.textContent)) {
      const m = el.textContent.match(/\n\s*(\w+(Error|Exception)[^\n]*)/);
      seen.add((m ? m[1] : "Traceback").slice(0, 200));
    }
  }
  out.errors = [...seen];
  return out;
})()
"""


@dataclass
class PageResult:
    page: str
    expected_charts: int = 0
    drawn_charts: int = 0
    requests: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


class CDP:
    """Minimal DevTools-protocol client over Chromium's ``--remote-debugging-pipe`` (fds 3/4)."""

    def __init__(self, argv: list[str], stderr_path: Path):
        # Chromium reads commands on fd 3 and writes answers on fd 4. A two-line Python
        # trampoline moves the child's pipe ends there and execs Chromium (no preexec_fn, which
        # is unsafe with threads); the ends start on high fds so the moves cannot clobber them.
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        cmd_r = _high_fd(cmd_r)
        res_w = _high_fd(res_w)
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _TRAMPOLINE, str(cmd_r), str(res_w), *argv],
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            pass_fds=(cmd_r, res_w),
        )
        os.close(cmd_r)
        os.close(res_w)
        self._w = cmd_w
        self._r = res_r
        self._id = 0
        self._q: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._responses: dict[int, dict] = {}
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._q.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self._q.put(json.loads(msg))

    def _pump(self, timeout: float) -> bool:
        try:
            msg = self._q.get(timeout=timeout)
        except queue.Empty:
            return True
        if msg is None:
            raise RuntimeError("Chromium closed the DevTools pipe (crashed or exited)")
        if "id" in msg:
            self._responses[msg["id"]] = msg
        else:
            self.events.append(msg)
        return True

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while self._id not in self._responses:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no DevTools answer to {method} within {timeout} s")
            self._pump(0.1)
        res = self._responses.pop(self._id)
        if "error" in res:
            raise RuntimeError(f"DevTools {method}: {res['error']}")
        return res.get("result", {})

    def wait_event(self, method: str, session: str | None, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        start = 0
        while True:
            for ev in self.events[start:]:
                if ev.get("method") == method and (session is None or ev.get("sessionId") == session):
                    return ev
            start = len(self.events)
            if time.monotonic() > deadline:
                return None
            self._pump(0.1)

    def idle(self, seconds: float):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._pump(0.05)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - fall back to terminating our own process
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stderr.close()


_TRAMPOLINE = (
    "import os, sys; a, b = int(sys.argv[1]), int(sys.argv[2]); os.dup2(a, 3); os.dup2(b, 4); "
    "os.close(a); os.close(b); os.execv(sys.argv[3], sys.argv[3:])"
)


def _high_fd(fd: int) -> int:
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


def expected_charts(html: str) -> list[str]:
    """Ids of the chart containers a page's source asks vega-embed to fill, in page order."""
    ids = ALTAIR_CONTAINER.findall(html) + EMBED_TARGET.findall(html)
    return list(dict.fromkeys(ids))


def url_in_site(url: str, site: Path) -> bool:
    """True for a file:// URL under ``site`` and for data:/blob:/about: URLs; False otherwise."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):
        return True
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return False
    path = Path(unquote(parts.path)).resolve()
    return path == site or site in path.parents


def read_netlog(path: Path) -> list[dict]:
    """Events of a Chromium net log; tolerant of a log cut short by an abrupt exit."""
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if data is not None:
        types = {v: k for k, v in data.get("constants", {}).get("logEventTypes", {}).items()}
        events = data.get("events", [])
    else:  # one event per line after the constants; keep what parses
        types, events = {}, []
        for line in text.splitlines():
            line = line.strip().rstrip(",")
            if line.startswith('{"constants"'):
                try:
                    constants = json.loads(line[len('{"constants":'):])
                    types = {v: k for k, v in constants.get("logEventTypes", {}).items()}
                except json.JSONDecodeError:
                    pass
            elif line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    for ev in events:
        ev["type_name"] = types.get(ev.get("type"), str(ev.get("type")))
    return events


def page_network_requests(events: list[dict]) -> list[str]:
    """URLs of network requests started for a page (not by the browser's own services).

    Chromium marks its own background requests (update checks, time sync, account lookups) with
    the initiator "not an origin"; a request made by a page or one of its workers carries the
    page's origin (``null`` for file://).
    """
    urls = []
    for ev in events:
        if ev["type_name"] != "URL_REQUEST_START_JOB":
            continue
        params = ev.get("params") or {}
        if "url" in params and params.get("initiator") != "not an origin":
            urls.append(params["url"])
    return urls


def check_page(page: Path, site: Path, *, load_timeout: float, chart_timeout: float, keep: Path | None) -> PageResult:
    t0 = time.monotonic()
    rel = str(page.relative_to(site))
    result = PageResult(page=rel)
    html = page.read_text(encoding="utf-8", errors="replace")
    ids = expected_charts(html)
    result.expected_charts = len(ids)
    state: dict = {}
    work = Path(tempfile.mkdtemp(prefix="check-site-"))
    netlog = work / "netlog.json"
    argv = [CHROMIUM, *BASE_FLAGS, f"--user-data-dir={work / 'profile'}", f"--log-net-log={netlog}",
            "--remote-debugging-pipe", "about:blank"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")
    cdp = CDP(argv, work / "chromium.log")
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            cdp.send(f"{domain}.enable", session=session)
        cdp.send("Page.navigate", {"url": page.as_uri()}, session=session)
        if cdp.wait_event("Page.loadEventFired", session, load_timeout) is None:
            result.problems.append(f"page did not finish loading within {load_timeout:.0f} s")
        probe = DOM_PROBE.replace("%IDS%", json.dumps(ids))

        def evaluate() -> dict:
            # A page that redirects (index.html -> book/intro.html) navigates under the probe:
            # wait for the new document and probe again.
            for _ in range(20):
                try:
                    res = cdp.send("Runtime.evaluate", {"expression": probe, "returnByValue": True},
                                   session=session)
                    return res.get("result", {}).get("value") or {}
                except RuntimeError as exc:
                    if "navigated or closed" not in str(exc) and "context" not in str(exc):
                        raise
                    cdp.wait_event("Page.loadEventFired", session, 2.0)
            raise RuntimeError("page kept navigating; could not probe its DOM")

        start = time.monotonic()
        while True:
            state = evaluate()
            pending = [i for i, s in state.get("charts", {}).items() if s == "pending"]
            waited = time.monotonic() - start
            if not pending or waited > chart_timeout:
                break
            # An uncaught exception fails the page anyway: give pending charts a short grace only.
            if waited > 1.5 and any(e.get("method") == "Runtime.exceptionThrown" for e in cdp.events):
                break
            cdp.idle(0.2)
        cdp.idle(0.5)  # let late requests (fonts, lazily loaded scripts) show up
        state = evaluate() or state
    except Exception as exc:  # noqa: BLE001 - a page that breaks the browser is a failed page
        result.problems.append(f"browser error: {type(exc).__name__}: {exc}")
    finally:
        cdp.close()

    # (a) charts
    charts = state.get("charts", {})
    for cid in ids:
        status = charts.get(cid, "not probed")
        if status == "drawn":
            result.drawn_charts += 1
        else:
            if status == "pending":
                status = "not drawn (no graphics-document with marks, no error message)"
            result.problems.append(f"chart #{cid} {status}")
    if ids and result.drawn_charts != len(ids):
        result.problems.append(f"{result.drawn_charts} of {len(ids)} charts in the page source drawn")
    # (b) requests, from DevTools (all schemes) and the net log (network only)
    seen_urls = set()
    for ev in cdp.events:
        method = ev.get("method")
        params = ev.get("params", {})
        if method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            result.requests += 1
            if not url_in_site(url, site) and url not in seen_urls:
                seen_urls.add(url)
                result.problems.append(f"requests outside the site: {url}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            req = next((e["params"]["request"]["url"] for e in cdp.events
                        if e.get("method") == "Network.requestWillBeSent"
                        and e["params"].get("requestId") == params.get("requestId")), "?")
            if url_in_site(req, site) and urlsplit(req).scheme == "file":
                result.problems.append(f"site file failed to load ({params.get('errorText')}): {req}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            result.problems.append(f"uncaught JavaScript exception: {text.splitlines()[0][:200] if text else '?'}")
    for url in page_network_requests(read_netlog(netlog)):
        if url not in seen_urls:
            seen_urls.add(url)
            result.problems.append(f"network request outside the site (net log): {url}")
    # (c) error outputs
    for err in state.get("errors", []):
        result.problems.append(f"notebook output shows an error: {err}")
    result.problems = [" ".join(p.split()) for p in result.problems]  # one line per problem
    if keep is not None:
        dest = keep / rel.replace("/", "__")
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("netlog.json", "chromium.log"):
            if (work / name).exists():
                shutil.copy(work / name, dest / name)
        (dest / "devtools-events.json").write_text(json.dumps(cdp.events, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    result.seconds = time.monotonic() - t0
    return result


def site_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if not SKIP_DIRS & set(p.relative_to(site).parts[:-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default="_build/html", type=Path, help="built site (default _build/html)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="pages checked at once")
    parser.add_argument("--load-timeout", type=float, default=30.0, help="seconds for a page's load event")
    parser.add_argument("--chart-timeout", type=float, default=15.0, help="seconds for every chart to draw")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy each page's logs into this folder")
    args = parser.parse_args(argv)

    site = args.site.resolve()
    if not site.is_dir():
        print(f"check-site: {site} does not exist; build the book first (make book)", file=sys.stderr)
        return 2
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        print(f"check-site: Chromium not found at {CHROMIUM} (apt-get install -y chromium)", file=sys.stderr)
        return 2
    pages = site_pages(site)
    if not pages:
        print(f"check-site: no HTML pages under {site}", file=sys.stderr)
        return 1
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: check_page(p, site, load_timeout=args.load_timeout,
                                                     chart_timeout=args.chart_timeout, keep=args.keep_logs), pages))
    failed = [r for r in results if r.problems]
    width = max(len(r.page) for r in results)
    for r in results:
        verdict = "FAIL" if r.problems else "ok"
        print(f"{verdict:4}  {r.page:<{width}}  charts {r.drawn_charts}/{r.expected_charts} drawn  "
              f"{r.requests:3d} requests  {r.seconds:4.1f} s")
    for r in failed:
        for problem in r.problems:
            print(f"check-site: FAIL {r.page}: {problem}")
    total = sum(r.expected_charts for r in results)
    print(f"check-site: {len(results) - len(failed)} of {len(results)} pages ok, "
          f"{sum(r.drawn_charts for r in results)} of {total} charts drawn, site {site}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
