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

The page rules below are measured in the live DOM of a window WINDOW_WIDTH (1400) px wide, where
the book's content column (the content box of ``article.bd-article``; ``<main>`` or ``<body>`` on a
page without the theme) is 784 px wide. A page FAILS when

(e) a pandas table shows its truncation: a row or a column of ``...``/``…`` cells (pandas's
    ``to_html``), cells of the Styler's ``row_trim``/``col_trim`` classes, or a ``<p>N rows × M
    columns</p>`` footer after a table that shows fewer rows or columns than the footer states;
(f) a ``<table>`` in the column is rendered wider than the column. A table that scrolls sideways
    hides columns from a reader who does not think of scrolling, so a scroll container alone does
    not excuse it: the page must say why the table is wide. A wide table passes only when
    (1) an element between it and the column is a scroll container by design: computed
    ``overflow-x`` ``auto`` or ``scroll``, its own box within the column, and not one of the
    wrappers the theme puts around *every* output or table (THEME_SCROLL_WRAPPERS, e.g.
    ``div.cell_output .output``); a chapter's container is an element of its own output around the
    table, e.g. ``<div class="pdcalc-table" style="overflow-x:auto;max-width:100%">`` as
    ``pdcalc.book.display.table`` writes it, or the cell tag ``scroll-output``; and (2) the table
    carries the class WIDE_CLASS (``pdcalc-wide``) and a rendered element of the class WIDE_WHY_CLASS
    (``pdcalc-wide-why``) in its caption or its scroll container says why, in at least
    MIN_WHY_WORDS words. ``pdcalc.book.display.table(df, wide="...")`` writes both: the class and a
    caption line "Wide table, scroll sideways: <why>". A table folded in a closed ``<details>`` is
    measured as laid out, since a reader who opens it sees that width;
(g) visible code takes more than MAX_CODE_SHARE (3 %) of the page's height: the rendered heights
    of the code input areas (myst-nb's ``div.cell_input``) are summed, except the input of a cell
    tagged ``parameters`` (``div.cell.tag_parameters``), and divided by the document's height.
    An input behind a ``hide-input`` toggle (``<details class="hide above-input">``, closed) is
    not rendered and counts 0 px; the toggle's one-line "Show code cell source" bar is not code;
(h) a number is printed with trailing zero decimals that carry no information: ``.00`` (two or
    more zeros) after an integer part of two or more digits or after ``0`` (``73,700.00``,
    ``12.00``, ``0.00``), in a table or in prose. ``1.00`` (a ratio at three significant figures)
    passes. Code (inputs, ``pre``, ``code``), math, charts and scripts are not read (TEXT_SKIP), nor
    is a verbatim quote of a source (``q``, ``blockquote``, or a cell of the class ``pdcalc-quote`` that
    ``pdcalc.book.display.table(df, quotes=...)`` writes: what an article prints, in its own style);
(i) raw MyST or Python syntax shows in rendered prose or in a table: a MyST role or directive
    name in braces (``{term}``, ``{glue:text}``, ``{doc}``), a substitution's ``{{``/``}}``, a
    backtick (a code span or role that did not render), ``**`` (Python's power or keyword
    unpacking, ``2**30``, ``**kwargs``, or bold markers that did not render), a numpy repr
    (``np.float64(...)``) or a Python float in ``e`` notation (``1.5e+07``). Text inside code
    elements is code, and quotes are quotes: neither is read, as in (h) (RAW_SYNTAX lists the patterns;
    a name in braces counts only when it is a MyST role or directive, MYST_NAMES, so that a tensor name
    pattern such as ``experts.{expert}.w1`` passes).
(j) a what-if chart (live parameters, :mod:`pdcalc.book.whatif`) does not follow its controls or disagrees with
    the command line: for each chart whose spec carries a ``usermeta.pdcalc`` check, the page's drop-downs are
    set as the check says, the figure it names must change within 5 s, and it must equal what ``pdcalc`` prints
    as JSON for the same inputs (the command is in the check), at the precision the page shows.

Each page gets one summary line (charts, requests, visible-code share, widest table against the
column, truncated tables, trailing-zero numbers, raw syntax); each problem one line naming the page,
the element (its table, row and column, or the heading it is under) and the offending text.

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
    // vega-embed wraps the view in a graphics-document unless the chart hides its actions (what-if charts)
    const view = el.querySelector('[role="graphics-document"]') || el.querySelector("svg.marks");
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


# Page rules (e)-(g): the window they are measured in and the limit on visible code.
WINDOW_WIDTH = 1400
WINDOW_HEIGHT = 900
MAX_CODE_SHARE = 0.03  # visible code input, parameters cell aside, over the page's height
# Elements the theme / myst-nb give overflow-x: auto around every output or docutils table; a
# table is not "in a scroll container by design" because of these alone.
THEME_SCROLL_WRAPPERS = ["div.cell_output .output", ".pst-scrollable-table-container"]
# The content column: the first match, in this order.
COLUMN_SELECTORS = ["article.bd-article", "[role='main']", "main", "body"]
# (f) A table wider than the column says why: this class on the table, and a rendered element of
# WIDE_WHY_CLASS with at least MIN_WHY_WORDS words in its caption or its scroll container.
WIDE_CLASS = "pdcalc-wide"
WIDE_WHY_CLASS = "pdcalc-wide-why"
MIN_WHY_WORDS = 3

# (h), (i) Text rules: what is not read (code, math, charts, scripts), and the element a run of text
# belongs to (its nearest match; a table cell is named by its table, row and column).
TEXT_SKIP = ", ".join([
    "script", "style", "noscript", "template", "pre", "code", "kbd", "samp", "tt", "var", "div.cell_input",
    "div.highlight", "svg", "canvas", "math", "mjx-container", ".math", ".MathJax", ".headerlink",
    # verbatim quotes of a source: what it prints, in its own style (pdcalc.book.display's QUOTE_CLASS)
    "q", "blockquote", ".pdcalc-quote",
])
TEXT_BLOCKS = ", ".join(["td", "th", "caption", "p", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
                         "figcaption", "summary", "blockquote", "div"])
# (h) ``.00`` after an integer part of two or more digits (thousands separators included) or after 0.
TRAILING_ZEROS = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|[1-9]\d+|0)\.0{2,}(?![\d])")
# (i) Names of MyST roles and directives whose ``{name}`` in rendered text is a leftover (a tensor name
# pattern such as ``experts.{expert}.w1`` is not one).
MYST_NAMES = [
    "term", "doc", "ref", "numref", "eq", "math", "abbr", "sub", "sup", "download", "index", "code", "cite",
    r"glue(?::[a-z]*)?", r"py:[a-z]+", r"prf:[a-z]+", "func", "class", "mod", "meth", "attr", "data", "kbd",
    "guilabel", "menuselection", "rfc", "pep", "dropdown", "note", "warning", "tip", "important", "caution",
    "admonition", "figure", "image", "list-table", "table", "code-cell", "toctree", "tab-set", "tab-item",
    "card", "grid", "margin", "sidebar", "glossary", "raw", "eval-rst", "include", "literalinclude",
    "contents", "bibliography", "mermaid", "seealso", "topic",
]
# (i) Raw MyST or Python syntax, by what it is.
RAW_SYNTAX = [
    ("a MyST role or directive name", re.compile(r"\{(?:%s)\}" % "|".join(MYST_NAMES))),
    ("a MyST substitution brace", re.compile(r"\{\{|\}\}")),
    ("a backtick", re.compile(r"`")),
    ("Python's ** (power, keyword unpacking) or unrendered bold", re.compile(r"\*\*")),
    ("a numpy repr", re.compile(r"\bnp\.[a-z_]+\d*\(")),
    ("a Python float in e notation", re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[+-]\d+\b")),
]
TEXT_CONTEXT = 40  # characters shown either side of a match

LAYOUT_PROBE = r"""
(() => {
  const THEME = %THEME%, COLUMN = %COLUMN%, WIDE = %WIDE%, WHY = %WHY%, SKIP = %SKIP%, BLOCKS = %BLOCKS%;
  const px = v => parseFloat(v) || 0;
  // Not shown: display none, visibility hidden, or inside a closed <details> (whose content
  // Chromium still lays out, under content-visibility: hidden, with its full size).
  const closed = el => { const d = el.closest("details:not([open])");
                         return !!d && !el.closest("summary")?.parentElement?.isSameNode(d); };
  const rendered = el => el.getClientRects().length > 0 && !closed(el) &&
    (el.checkVisibility ? el.checkVisibility({visibilityProperty: true}) : getComputedStyle(el).visibility !== "hidden");
  const col = COLUMN.map(s => document.querySelector(s)).find(Boolean) || document.documentElement;
  const ccs = getComputedStyle(col), cr = col.getBoundingClientRect();
  const left = cr.left + px(ccs.borderLeftWidth) + px(ccs.paddingLeft);
  const right = cr.right - px(ccs.borderRightWidth) - px(ccs.paddingRight);
  const cells = [...document.querySelectorAll("div.cell")];
  const cellNo = el => { const c = el.closest("div.cell"); return c ? cells.indexOf(c) + 1 : 0; };
  const heads = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")];
  const under = el => {
    const h = heads.filter(x => x.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING).pop();
    if (!h) return "";
    const c = h.cloneNode(true);
    c.querySelectorAll(".headerlink").forEach(a => a.remove());
    return c.textContent.replace(/\s+/g, " ").trim().slice(0, 60);
  };
  const out = {
    viewport: window.innerWidth,
    column: {selector: COLUMN.find(s => document.querySelector(s)) || "html", width: right - left},
    docHeight: Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0),
    code: [], tables: [], text: [],
  };
  // (g) code input areas
  for (const el of document.querySelectorAll("div.cell_input")) {
    const height = rendered(el) ? el.getBoundingClientRect().height : 0;
    out.code.push({cell: cellNo(el), height, parameters: !!el.closest(".tag_parameters"),
                   collapsed: closed(el),
                   first: (el.textContent.trim().split("\n")[0] || "").trim().slice(0, 50)});
  }
  // (e), (f) tables in the column
  const dots = c => /^(\.\.\.|…)$/.test(c.textContent.trim());
  const tables = [...col.querySelectorAll("table")];
  // A table folded in a closed <details> is measured as laid out: a reader who opens it sees that width.
  // (checkVisibility() is false inside a closed <details>, whose content is content-visibility: hidden.)
  const laidOut = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
  tables.forEach((t, i) => {
    if (!laidOut(t)) return;
    const r = t.getBoundingClientRect();
    const width = Math.max(r.width, t.scrollWidth);
    let scroller = null, inThemeWrapper = false, wideScroller = null, scrollerEl = null;
    for (let a = t.parentElement; a && a !== col; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox !== "auto" && ox !== "scroll") continue;
      if (THEME.some(s => a.matches(s))) { inThemeWrapper = true; continue; }
      const ar = a.getBoundingClientRect();
      const name = a.tagName.toLowerCase() + (a.id ? "#" + a.id : "") + [...a.classList].map(c => "." + c).join("");
      if (ar.left >= left - 1 && ar.right <= right + 1) { scroller = name; scrollerEl = a; break; }
      if (!wideScroller) wideScroller = {name, width: ar.width};
    }
    // (f) the page says why a table is wide: the class on the table, a rendered reason beside it
    const whyEls = [...(t.caption ? t.caption.querySelectorAll("." + WHY) : []),
                    ...(scrollerEl ? scrollerEl.querySelectorAll("." + WHY) : [])];
    const why = whyEls.filter(laidOut).map(e => e.textContent.replace(/\s+/g, " ").trim())
                      .sort((a, b) => b.length - a.length)[0] || "";
    const bodyRows = t.tBodies.length ? [...t.tBodies].flatMap(b => [...b.rows]) : [...t.rows];
    const dotRow = bodyRows.some(tr => {
      const tds = [...tr.cells].filter(c => c.tagName === "TD");
      return tds.length > 0 && [...tr.cells].every(dots);
    });
    const tdsOf = tr => [...tr.cells].filter(c => c.tagName === "TD");
    const dataRows = bodyRows.filter(tr => !(tdsOf(tr).length && [...tr.cells].every(dots)));
    let dotCol = false;
    const headDots = !t.tHead || [...t.tHead.querySelectorAll("th, td")].some(dots);
    const ncols = Math.max(0, ...dataRows.map(tr => tdsOf(tr).length));
    for (let j = 0; j < ncols && dataRows.length && headDots; j++) {
      if (dataRows.every(tr => { const c = tdsOf(tr)[j]; return c && dots(c); })) { dotCol = true; break; }
    }
    const trimmed = !!t.querySelector(".row_trim, .col_trim");
    let footer = null;
    const p = t.nextElementSibling;
    const m = p && p.tagName === "P" && p.textContent.trim().match(/^([\d,]+) rows? [×x] ([\d,]+) columns?$/);
    if (m) {
      const rows = +m[1].replace(/,/g, ""), columns = +m[2].replace(/,/g, "");
      const shownCols = dataRows.length ? tdsOf(dataRows[0]).filter(c => !dots(c)).length : 0;
      if (dataRows.length < rows || shownCols < columns) footer = p.textContent.trim();
    }
    // Column names from the header row that names the most (pandas adds a row of index names).
    const names = t.tHead ? [...t.tHead.rows].map(tr => [...tr.cells].map(c => c.textContent.trim())
        .filter(x => x && !/^(\.\.\.|…)$/.test(x))).reduce((a, b) => (b.length > a.length ? b : a), []) : [];
    out.tables.push({
      index: i + 1, id: t.id, cell: cellNo(t), under: under(t), columns: names.slice(0, 4), ncolumns: names.length,
      width, scroller, inThemeWrapper, wideScroller, dotRow, dotCol, trimmed, footer,
      marked: t.classList.contains(WIDE), why,
    });
  });
  // (h), (i) text outside code, math and charts, one entry per block (table cell, paragraph, ...)
  const blocks = new Map();
  const walker = document.createTreeWalker(col, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const parent = n.parentElement;
    if (!parent || parent.closest(SKIP)) continue;
    const b = parent.closest(BLOCKS) || parent;
    if (!blocks.has(b)) blocks.set(b, []);
    blocks.get(b).push(n.nodeValue);
  }
  for (const [b, parts] of blocks) {
    const text = parts.join("").replace(/\s+/g, " ").trim();
    if (!text) continue;
    const td = b.closest("td, th"), t = b.closest("table");
    let column = "";
    if (td && t && t.tHead && t.tHead.rows.length) {
      const hr = t.tHead.rows[t.tHead.rows.length - 1].cells[td.cellIndex];
      column = hr ? hr.textContent.replace(/\s+/g, " ").trim().slice(0, 40) : "";
    }
    out.text.push({text, tag: b.tagName.toLowerCase(), cell: cellNo(b), under: under(b),
                   table: t ? tables.indexOf(t) + 1 : 0, tableId: t ? t.id : "",
                   row: td ? td.parentElement.rowIndex : -1, column});
  }
  return out;
})()
"""


def layout_probe() -> str:
    """LAYOUT_PROBE with this module's selectors and class names filled in."""
    values = {"THEME": THEME_SCROLL_WRAPPERS, "COLUMN": COLUMN_SELECTORS, "WIDE": WIDE_CLASS, "WHY": WIDE_WHY_CLASS,
              "SKIP": TEXT_SKIP, "BLOCKS": TEXT_BLOCKS}
    probe = LAYOUT_PROBE
    for name, value in values.items():
        probe = probe.replace(f"%{name}%", json.dumps(value))
    return probe


@dataclass
class PageResult:
    page: str
    expected_charts: int = 0
    drawn_charts: int = 0
    requests: int = 0
    code_share: float | None = None  # visible code input / page height (rule g)
    widest_table: float = 0.0  # px, widest rendered table in the column
    column_width: float | None = None  # px, content box of the column
    truncated_tables: int = 0
    wide_tables: int = 0  # tables wider than the column (rule f), said why or not
    trailing_zeros: int = 0  # numbers printed with .00 (rule h)
    raw_syntax: int = 0  # raw MyST or Python syntax in prose (rule i)
    live_checked: int = 0  # what-if charts changed and compared with the command line (rule j)
    live_expected: int = 0
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


def live_checks(html: str) -> list[tuple[str, dict]]:
    """Rule (j): the what-if charts of a page, as (element id, ``usermeta.pdcalc`` check) pairs, read from the
    specs Altair's loader embeds (:mod:`pdcalc.book.whatif`)."""
    out = []
    dec = json.JSONDecoder()
    for m in re.finditer(r'getElementById\("(altair-viz-[0-9a-f]+)"\)', html):
        start = html.find("})(", m.end())
        if start < 0:
            continue
        try:
            spec, _ = dec.raw_decode(html, start + 3)
        except ValueError:
            continue
        check = (spec.get("usermeta") or {}).get("pdcalc")
        if check:
            out.append((m.group(1), check))
    return out


def cli_value(check: dict) -> float | str:
    """What ``pdcalc`` prints for a what-if check's inputs: its JSON at ``json_path``, scaled and rounded."""
    cmd = [sys.executable, "-c", "import sys; from pdcalc.cli import main; sys.exit(main())", *check["cli"]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"pdcalc {' '.join(check['cli'])} exited {done.returncode}: {done.stderr.strip()[:200]}")
    value = json.loads(done.stdout)
    for key in check["json_path"]:
        value = value[key]
    if check.get("decimals") is None:
        return str(value)
    return round(float(value) / int(check.get("divide_by", 1)), int(check["decimals"]))


def shown_number(text: str) -> float | None:
    """The first number of a figure as a page shows it ("21.60 GiB", "7,407")."""
    m = re.search(r"-?[\d,]*\.?\d+", text)
    return float(m.group(0).replace(",", "")) if m else None


LIVE_PROBE = r"""
(async () => {
  const root = document.getElementById(%ID%);
  if (!root) return {error: "chart element not found"};
  const set = %SET%, want = %FIELD% + "=";
  const read = () => { const el = [...root.querySelectorAll("[aria-label]")]
                          .find(e => e.getAttribute("aria-label").startsWith(want));
                       return el ? el.getAttribute("aria-label").slice(want.length) : null; };
  const before = read();
  for (const [col, v] of Object.entries(set)) {
    const sel = root.querySelector(`select[name="p_${col}"]`);
    if (!sel) return {error: `no control for ${col}`};
    const i = [...sel.options].findIndex(o => o.value === String(v) || o.textContent.trim() === String(v));
    if (i < 0) return {error: `control ${col} offers no ${v}`};
    sel.selectedIndex = i;
    sel.dispatchEvent(new Event("change", {bubbles: true}));
    sel.dispatchEvent(new Event("input", {bubbles: true}));
  }
  const t0 = performance.now();
  let now = read();
  while (performance.now() - t0 < 5000 && now === before) {
    await new Promise(r => setTimeout(r, 50));
    now = read();
  }
  return {before, now, ms: performance.now() - t0};
})()
"""


def run_live_check(evaluate, cid: str, check: dict) -> str | None:
    """Change a what-if chart's controls in the page, wait for the redraw and compare the figure it then shows with
    the command line's for the same inputs; a problem, or None."""
    try:
        expected = cli_value(check)
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, TypeError, ValueError) as exc:
        return f"what-if #{cid}: the command line gave no value ({exc})"
    probe = (LIVE_PROBE.replace("%ID%", json.dumps(cid)).replace("%SET%", json.dumps(check["set"]))
             .replace("%FIELD%", json.dumps(check["field"])))
    got = evaluate(probe, await_promise=True)
    if got.get("error"):
        return f"what-if #{cid}: {got['error']}"
    shown = got.get("now")
    if shown is None or shown == got.get("before"):
        return f"what-if #{cid}: {check['field']!r} did not change within 5 s of setting {check['set']}"
    value = shown if isinstance(expected, str) else shown_number(shown)
    if value != expected:
        return (f"what-if #{cid}: after {check['set']} the page shows {check['field']} = {shown!r}; "
                f"pdcalc {' '.join(check['cli'])} gives {expected!r}")
    return None


def check_page(page: Path, site: Path, *, load_timeout: float, chart_timeout: float, keep: Path | None) -> PageResult:
    t0 = time.monotonic()
    rel = str(page.relative_to(site))
    result = PageResult(page=rel)
    html = page.read_text(encoding="utf-8", errors="replace")
    ids = expected_charts(html)
    result.expected_charts = len(ids)
    state: dict = {}
    layout: dict = {}
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
        cdp.send("Emulation.setDeviceMetricsOverride",
                 {"width": WINDOW_WIDTH, "height": WINDOW_HEIGHT, "deviceScaleFactor": 1, "mobile": False},
                 session=session)
        cdp.send("Page.navigate", {"url": page.as_uri()}, session=session)
        if cdp.wait_event("Page.loadEventFired", session, load_timeout) is None:
            result.problems.append(f"page did not finish loading within {load_timeout:.0f} s")
        probe = DOM_PROBE.replace("%IDS%", json.dumps(ids))

        def evaluate(expression: str = probe, await_promise: bool = False) -> dict:
            # A page that redirects (index.html -> book/intro.html) navigates under the probe:
            # wait for the new document and probe again.
            for _ in range(20):
                try:
                    res = cdp.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": await_promise},
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
        # Layout is measured once charts are drawn and web fonts are in.
        evaluate("Promise.race([document.fonts.ready.then(() => true),"
                 " new Promise(r => setTimeout(() => r(false), 5000))])", await_promise=True)
        layout = evaluate(layout_probe())
        # (j) what-if charts: change a control, wait for the redraw, compare with the command line
        for cid, chk in live_checks(html):
            result.live_expected += 1
            problem = run_live_check(evaluate, cid, chk)
            if problem:
                result.problems.append(problem)
            else:
                result.live_checked += 1
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
    # (e)-(g) page rules
    if layout:
        result.problems.extend(layout_problems(layout, result))
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


def _table_name(t: dict) -> str:
    name = f"table #{t['id']}" if t.get("id") else f"table {t['index']} of the page"
    where = []
    if t.get("cell"):
        where.append(f"output of code cell {t['cell']}")
    if t.get("under"):
        where.append(f'under "{t["under"]}"')
    if t.get("columns"):
        more = ", ..." if t.get("ncolumns", 0) > len(t["columns"]) else ""
        where.append("columns " + ", ".join(t["columns"]) + more)
    return name + (f" ({'; '.join(where)})" if where else "")


def layout_problems(layout: dict, result: PageResult) -> list[str]:
    """Rules (e)-(g) on the LAYOUT_PROBE measurements of one page; fills the result's numbers."""
    problems = []
    if layout.get("viewport") != WINDOW_WIDTH:
        problems.append(f"measured in a window {layout.get('viewport')} px wide, not {WINDOW_WIDTH} px")
    column = layout.get("column", {})
    col_width = column.get("width") or 0.0
    result.column_width = col_width
    # (e) truncated pandas tables
    for t in layout.get("tables", []):
        signs = []
        if t["dotRow"]:
            signs.append('a row of "..." cells')
        if t["dotCol"]:
            signs.append('a column of "..." cells')
        if t["trimmed"]:
            signs.append("Styler row_trim/col_trim cells")
        if t["footer"]:
            signs.append(f'footer "{t["footer"]}"')
        if signs:
            result.truncated_tables += 1
            problems.append(f"truncated pandas table: {_table_name(t)} shows {', '.join(signs)}")
    # (f) tables wider than the column
    for t in layout.get("tables", []):
        result.widest_table = max(result.widest_table, t["width"])
        if t["width"] <= col_width + 1:
            continue
        result.wide_tables += 1
        size = f"is {t['width']:.0f} px wide, the column {col_width:.0f} px"
        if not t["scroller"]:
            note = ""
            if t.get("wideScroller"):
                wide = t["wideScroller"]
                note = f" (its scroll container {wide['name']} is {wide['width']:.0f} px wide, not within the column)"
            elif t["inThemeWrapper"]:
                note = " (only the theme's wrapper of every output scrolls)"
            problems.append(f"table wider than the content column, outside a scroll container: {_table_name(t)} "
                            f"{size}{note}")
            continue
        why = t.get("why") or ""
        if t.get("marked") and len(why.split()) >= MIN_WHY_WORDS:
            continue
        if t.get("marked"):
            missing = (f'it has the class {WIDE_CLASS} but no rendered .{WIDE_WHY_CLASS} of at least {MIN_WHY_WORDS} '
                       f'words in its caption or scroll container says why{f" (only: {why!r})" if why else ""}')
        else:
            missing = (f"the page does not say why (class {WIDE_CLASS} on the table and a rendered "
                       f".{WIDE_WHY_CLASS} reason, as pdcalc.book.display.table(df, wide=...) writes them)")
        problems.append(f"table wider than the content column, scrolls sideways in {t['scroller']}: {_table_name(t)} "
                        f"{size}; {missing}")
    problems.extend(text_problems(layout.get("text", []), result))
    # (g) visible code
    height = layout.get("docHeight") or 0
    counted = [c for c in layout.get("code", []) if not c["parameters"] and c["height"] > 0]
    code_px = sum(c["height"] for c in counted)
    result.code_share = code_px / height if height else 0.0
    if result.code_share > MAX_CODE_SHARE:
        tallest = sorted(counted, key=lambda c: -c["height"])[:3]
        names = ", ".join(f'code cell {c["cell"]} ({c["height"]:.0f} px, "{c["first"]}")' for c in tallest)
        problems.append(f"visible code is {100 * result.code_share:.1f} % of the page's height "
                        f"({code_px:,.0f} of {height:,.0f} px; limit {100 * MAX_CODE_SHARE:g} %): "
                        f"{len(counted)} code cell input{'s' if len(counted) != 1 else ''} shown; tallest {names}")
    return problems


def _where(block: dict) -> str:
    """Where a block of text is: its table, row and column, or its element and heading."""
    parts = []
    if block.get("table"):
        name = f"table #{block['tableId']}" if block.get("tableId") else f"table {block['table']} of the page"
        parts.append(name + (f", row {block['row']}" if block.get("row", -1) >= 0 else "")
                     + (f', column "{block["column"]}"' if block.get("column") else ""))
    else:
        parts.append(f"<{block.get('tag', '?')}>")
    if block.get("cell"):
        parts.append(f"output of code cell {block['cell']}")
    if block.get("under"):
        parts.append(f'under "{block["under"]}"')
    return "; ".join(parts)


def _excerpt(text: str, start: int, end: int) -> str:
    a, b = max(0, start - TEXT_CONTEXT), min(len(text), end + TEXT_CONTEXT)
    return ("…" if a else "") + text[a:b] + ("…" if b < len(text) else "")


def text_problems(blocks: list[dict], result: PageResult) -> list[str]:
    """Rules (h) and (i) on the text blocks of LAYOUT_PROBE; counts them in the result.

    One problem line per block (a paragraph, a table cell) and rule, naming every distinct match; the
    page's counts add up every match."""
    problems = []
    for block in blocks:
        text = block.get("text", "")
        zeros = list(TRAILING_ZEROS.finditer(text))
        if zeros:
            result.trailing_zeros += len(zeros)
            shown = ", ".join(dict.fromkeys(m.group(0) for m in zeros))
            problems.append(f"number printed with trailing .00: {shown} in {_where(block)}: "
                            f"\"{_excerpt(text, zeros[0].start(), zeros[0].end())}\"")
        for what, pattern in RAW_SYNTAX:
            found = list(pattern.finditer(text))
            if found:
                result.raw_syntax += len(found)
                shown = ", ".join(repr(x) for x in dict.fromkeys(m.group(0) for m in found))
                problems.append(f"raw syntax in rendered text ({what}): {shown} in {_where(block)}: "
                                f"\"{_excerpt(text, found[0].start(), found[0].end())}\"")
    return problems


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
        code = "code    ? " if r.code_share is None else f"code {100 * r.code_share:4.1f} %"
        column = "?" if r.column_width is None else f"{r.column_width:.0f}"
        print(f"{verdict:4}  {r.page:<{width}}  charts {r.drawn_charts}/{r.expected_charts} drawn  "
              f"{r.requests:3d} requests  {code} (limit {100 * MAX_CODE_SHARE:g} %)  "
              f"widest table {r.widest_table:4.0f}/{column} px  {r.truncated_tables} truncated  "
              f"{r.wide_tables} wide  {r.trailing_zeros} .00  {r.raw_syntax} raw syntax  "
              f"live {r.live_checked}/{r.live_expected}  {r.seconds:4.1f} s")
    for r in failed:
        for problem in r.problems:
            print(f"check-site: FAIL {r.page}: {problem}")
    total = sum(r.expected_charts for r in results)
    print(f"check-site: {len(results) - len(failed)} of {len(results)} pages ok, "
          f"{sum(r.drawn_charts for r in results)} of {total} charts drawn, site {site}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
