"""tools/check_site.py must fail on a broken page and pass on a good one.

A tiny fake site is built in a temporary folder: the offline vega bundle made by
book/_ext/vega_offline.py, and pages holding real Altair HTML output, one per way a page can
break (a chart whose spec is broken, the bundle fetched from a CDN, a request made by a worker,
a file outside the site, a notebook traceback). A second set of pages copies the book's layout
(a content column 784 px wide in a 1400 px window, myst-nb's cell markup and CSS, the theme's
overflow wrapper around every output) and holds real pandas HTML output, one page per way the
page rules can break (a truncated table, a table wider than the column, too much visible code)
and pages that keep them (a wide table in a scroll container, a parameters cell, hidden code).
The browser tests need /usr/bin/chromium and are skipped, with that reason, only when it is
absent.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "book" / "_ext"))

import check_site  # noqa: E402

needs_chromium = pytest.mark.skipif(
    not os.access(check_site.CHROMIUM, os.X_OK),
    reason=f"Chromium not installed at {check_site.CHROMIUM} (apt-get install -y chromium)",
)

BAR = '"mark": {"type": "bar"}'


def _altair_html(title: str) -> str:
    """Real Altair HTML output (the text/html a chapter cell emits) for a small bar chart."""
    import altair as alt
    import pandas as pd

    chart = alt.Chart(pd.DataFrame({"part": ["a", "b"], "size": [2, 1]}), title=title)
    html = chart.mark_bar().encode(x="part:N", y="size:Q")._repr_mimebundle_()["text/html"]
    assert BAR in html
    return html


def _page(body: str, head: str) -> str:
    return f'<!doctype html>\n<html><head><meta charset="utf-8">{head}</head>\n<body>\n{body}\n</body></html>\n'


# The book's geometry at 1400 px: a 848 px article with 32 px padding (a 784 px column) after a
# 280 px sidebar, and pydata-sphinx-theme's overflow-x: auto on every cell output.
BOOK_CSS = """
body { margin: 0; font: 16px/1.5 sans-serif; }
article.bd-article { box-sizing: border-box; width: 848px; margin-left: 280px; padding: 0 32px; }
div.cell_output .output { max-width: 100%; overflow-x: auto; }
div.cell_input pre { margin: 0; font: 14px/20px monospace; }
"""
PROSE = "<p>" + "The deployment plan holds every expert on the cards of its group. " * 6 + "</p>"


def _mystnb_css() -> str:
    from importlib.resources import files

    return files("myst_nb").joinpath("static/mystnb.css").read_text(encoding="utf-8")


def _book_page(*parts: str, title: str = "Chapter") -> str:
    head = f'<link rel="stylesheet" href="_static/mystnb.css"><style>{BOOK_CSS}</style>'
    body = f'<main id="main-content"><article class="bd-article" role="main"><section><h1>{title}</h1>'
    return _page(body + "\n".join(parts) + "</section></article></main>", head)


def _cell(lines: int = 0, output: str = "", tags: tuple[str, ...] = (), hidden_open: bool | None = None) -> str:
    """A code cell as myst-nb 1.4 renders it: ``div.cell`` with ``tag_<tag>`` classes, the input
    (``lines`` lines of code, none for ``remove-input``) and its output. With ``hidden_open`` the
    input sits behind a hide-input toggle, closed (False) or opened by the reader (True)."""
    classes = " ".join(["cell", *(f"tag_{t}" for t in tags), "docutils", "container"])
    code = "\n".join(f"value_{i} = plan.cards[{i}].weights_bytes  # line {i}" for i in range(lines))
    src = (
        '<div class="cell_input docutils container"><div class="highlight-ipython3 notranslate">'
        f'<div class="highlight"><pre>{code}</pre></div></div></div>'
    ) if lines else ""
    if src and hidden_open is not None:
        src = (
            f'<details class="admonition hide above-input"{" open" if hidden_open else ""}>'
            '<summary aria-label="Toggle hidden content"><p class="collapsed admonition-title">Show code cell source'
            '</p><p class="expanded admonition-title">Hide code cell source</p></summary>' + src + "</details>"
        )
    out = f'<div class="cell_output docutils container"><div class="output text_html">{output}</div></div>' if output else ""
    return f'<div class="{classes}">{src}{out}</div>'


def _frame(rows: int, columns: int):
    import pandas as pd

    return pd.DataFrame([[123456.789 * (r + 1) + c for c in range(columns)] for r in range(rows)],
                        columns=[f"bytes_{c}" for c in range(columns)])


def _frame_html(rows: int, columns: int, **options) -> str:
    """Real pandas HTML output (a DataFrame's text/html) under the given display options."""
    import pandas as pd

    df = _frame(rows, columns)
    # pandas's defaults, pinned, then the page's own options
    settings = {"display.max_rows": 60, "display.max_columns": 20, "display.show_dimensions": "truncate"}
    settings |= {f"display.{name}": value for name, value in options.items()}
    with pd.option_context(*[x for item in settings.items() for x in item]):
        return df._repr_html_()


@pytest.fixture(scope="module")
def layout_site(tmp_path_factory) -> dict[str, Path]:
    """Book-like pages for the page rules: ``good`` keeps every rule, ``bad`` one page per breach."""
    from pdcalc.book import display

    prose = "\n".join([PROSE] * 40)  # several thousand px of text
    long_prose = "\n".join([PROSE] * 120)
    wide = _frame_html(3, 24, max_columns=None)  # about 24 x 100 px of unbreakable numbers: far wider than 784 px
    assert "<p>" not in wide and "..." not in wide
    small = _frame_html(3, 3)
    pages = {
        "good": {
            # A chapter's own scroll container, the one pdcalc.book.display puts every table in, and the
            # cell tag scroll-output.
            "scroll-container.html": _book_page(
                prose, _cell(output=f'<div style="overflow-x: auto">{wide}</div>', tags=("remove-input",)),
                _cell(output=display.table_html(_frame(3, 24)), tags=("remove-input",)),
                _cell(output=wide, tags=("remove-input", "scroll-output")),
            ),
            # Its input alone is more than 3 % of the page: it counts only because of the tag
            # (bad/parameters-untagged.html is the same page without it).
            "parameters-cell.html": _book_page(_cell(40, tags=("parameters",)), long_prose,
                                               _cell(output=small, tags=("remove-input",))),
            # Shown, these inputs would be far more than 3 % (bad/hidden-code-opened.html).
            "hidden-code.html": _book_page(
                prose, *[_cell(25, output=small, tags=("hide-input",), hidden_open=False) for _ in range(4)]
            ),
            # A whole frame shown with its dimensions is not truncated.
            "dimensions-footer.html": _book_page(prose, _cell(output=_frame_html(4, 3, show_dimensions=True),
                                                              tags=("remove-input",))),
        },
        "bad": {
            "truncated-rows.html": _book_page(prose, _cell(output=_frame_html(60, 3, max_rows=10),
                                                           tags=("remove-input",))),
            "truncated-columns.html": _book_page(
                prose, _cell(output=_frame_html(2, 30, max_columns=4, show_dimensions=False),
                             tags=("remove-input",))
            ),
            "wide-table.html": _book_page(
                prose, _cell(output=wide, tags=("remove-input",)),
                # a scroll container, but itself wider than the column
                _cell(output=f'<div style="overflow-x: auto; width: 1200px">{wide}</div>', tags=("remove-input",)),
            ),
            "too-much-code.html": _book_page(prose, *[_cell(15, output=small) for _ in range(3)]),
            "parameters-untagged.html": _book_page(_cell(40), long_prose,
                                                   _cell(output=small, tags=("remove-input",))),
            "hidden-code-opened.html": _book_page(
                prose, *[_cell(25, output=small, tags=("hide-input",), hidden_open=True) for _ in range(4)]
            ),
        },
    }
    sites = {}
    for name, files in pages.items():
        root = tmp_path_factory.mktemp(f"layout-{name}")
        (root / "_static").mkdir()
        (root / "_static" / "mystnb.css").write_text(_mystnb_css(), encoding="utf-8")
        for fname, text in files.items():
            (root / fname).write_text(text, encoding="utf-8")
        sites[name] = root
    return sites


@pytest.fixture(scope="module")
def fake_site(tmp_path_factory) -> dict[str, Path]:
    """Two sites: ``good`` (one drawn chart) and ``bad`` (one page per failure mode)."""
    import vega_offline

    bundle, versions = vega_offline.make_bundle()
    head = (
        f"<script>window.VEGA_DEBUG = {json.dumps(versions)};</script>"
        '<script src="_static/vega-offline/vega-bundle.js"></script>'
    )
    cdn_head = head.replace("_static/vega-offline/vega-bundle.js", "https://cdn.jsdelivr.net/npm/vega-embed@7")
    good_chart = _altair_html("good chart")
    broken_chart = _altair_html("broken chart").replace(BAR, '"mark": {"type": "no-such-mark"}')
    worker = (
        "<script>new Worker(URL.createObjectURL(new Blob("
        "[\"fetch('https://example.invalid/from-a-worker').catch(() => {})\"],"
        " {type: 'text/javascript'})));</script>"
    )
    traceback = (
        '<div class="cell_output docutils container"><div class="output traceback highlight-ipythontb">'
        "<pre>Traceback (most recent call last):\n  Cell In[1], line 1\nZeroDivisionError: division by zero"
        "</pre></div></div>"
    )
    pages = {
        "good": {"index.html": _page(good_chart, head)},
        "bad": {
            "good.html": _page(good_chart, head),
            "one-broken-chart.html": _page(good_chart + broken_chart, head),
            "bundle-from-cdn.html": _page(good_chart, cdn_head),
            "worker-request.html": _page(good_chart + worker, head),
            "file-outside-site.html": _page(good_chart + '<img src="file:///etc/hostname">', head),
            "traceback.html": _page(good_chart + traceback, head),
        },
    }
    sites = {}
    for name, files in pages.items():
        root = tmp_path_factory.mktemp(f"site-{name}")
        (root / "_static" / "vega-offline").mkdir(parents=True)
        (root / "_static" / "vega-offline" / "vega-bundle.js").write_text(bundle, encoding="utf-8")
        for fname, text in files.items():
            (root / fname).write_text(text, encoding="utf-8")
        sites[name] = root
    return sites


def _run(site: Path, capsys, summaries: dict | None = None) -> tuple[int, dict[str, list[str]]]:
    rc = check_site.main([str(site), "--chart-timeout", "5", "--jobs", "2"])
    out = capsys.readouterr().out
    print(out)  # shown by pytest on failure
    problems: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("check-site: FAIL "):
            page, _, msg = line[len("check-site: FAIL "):].partition(": ")
            problems.setdefault(page, []).append(msg)
        elif summaries is not None and line.split()[:1] in (["ok"], ["FAIL"]):
            summaries[line.split()[1]] = line
    return rc, problems


SUMMARY = re.compile(r"code +([\d.]+) % \(limit 3 %\) +widest table +(\d+)/(\d+) px +(\d+) truncated")


def _numbers(summary: str) -> tuple[float, int, int, int]:
    """(visible-code %, widest table px, column px, truncated tables) from a page's summary line."""
    m = SUMMARY.search(summary)
    assert m, summary
    return float(m[1]), int(m[2]), int(m[3]), int(m[4])


@needs_chromium
def test_good_site_passes(fake_site, capsys):
    rc, problems = _run(fake_site["good"], capsys)
    assert (rc, problems) == (0, {})


@needs_chromium
def test_each_broken_page_fails_with_its_reason(fake_site, capsys):
    rc, problems = _run(fake_site["bad"], capsys)
    assert rc == 1
    assert "good.html" not in problems, problems.get("good.html")

    broken = " | ".join(problems["one-broken-chart.html"])
    assert "1 of 2 charts in the page source drawn" in broken
    assert "Javascript Error" in broken  # Altair's own error message, shown in the chart's place

    cdn = " | ".join(problems["bundle-from-cdn.html"])
    assert "outside the site: https://cdn.jsdelivr.net/npm/vega-embed@7" in cdn
    assert "0 of 1 charts in the page source drawn" in cdn

    # Made by a worker, so only Chromium's net log sees it.
    assert any("(net log): https://example.invalid/from-a-worker" in p for p in problems["worker-request.html"])
    assert any("outside the site: file:///etc/hostname" in p for p in problems["file-outside-site.html"])
    assert problems["traceback.html"] == ["notebook output shows an error: ZeroDivisionError: division by zero"]


def test_expected_charts_are_counted_from_the_page_source():
    html = _altair_html("x") + _altair_html("y") + '<div id="vis"></div><script>vegaEmbed("#vis", {})</script>'
    ids = check_site.expected_charts(html)
    assert len(ids) == 3 and ids[-1] == "vis"
    assert all(i.startswith("altair-viz-") for i in ids[:2])


def test_url_in_site(tmp_path):
    site = tmp_path / "html"
    (site / "book").mkdir(parents=True)
    assert check_site.url_in_site((site / "book" / "a.html").as_uri(), site)
    assert check_site.url_in_site("data:image/png;base64,AAAA", site)
    assert not check_site.url_in_site((tmp_path / "elsewhere.js").as_uri(), site)
    assert not check_site.url_in_site((site / ".." / "x.js").as_uri(), site)
    assert not check_site.url_in_site("https://cdn.jsdelivr.net/npm/vega@6", site)
    assert not check_site.url_in_site("file://somehost/share/x.js", site)


def test_netlog_keeps_page_requests_and_drops_browser_services(tmp_path):
    log = {
        "constants": {"logEventTypes": {"URL_REQUEST_START_JOB": 7}},
        "events": [
            {"type": 7, "params": {"url": "https://update.googleapis.com/x", "initiator": "not an origin"}},
            {"type": 7, "params": {"url": "https://cdn.jsdelivr.net/npm/vega@6", "initiator": "null"}},
            {"type": 7, "params": {"net_error": -105}},
        ],
    }
    path = tmp_path / "net.json"
    path.write_text(json.dumps(log))
    assert check_site.page_network_requests(check_site.read_netlog(path)) == ["https://cdn.jsdelivr.net/npm/vega@6"]
    # Chromium writes the constants on line 1, then one event per line; a log cut short by an
    # abrupt exit has no closing brackets and is still read line by line.
    lines = ['{"constants":' + json.dumps(log["constants"]) + ",", '"events": [']
    lines += [json.dumps(ev) + "," for ev in log["events"]]
    path.write_text("\n".join(lines) + "\n")
    assert check_site.page_network_requests(check_site.read_netlog(path)) == ["https://cdn.jsdelivr.net/npm/vega@6"]


@needs_chromium
def test_pages_that_keep_the_page_rules_pass(layout_site, capsys):
    summaries: dict[str, str] = {}
    rc, problems = _run(layout_site["good"], capsys, summaries)
    assert (rc, problems) == (0, {})
    code, widest, column, truncated = _numbers(summaries["scroll-container.html"])
    assert column == 784 and widest > 2 * column  # wide, but each in a container that scrolls
    assert truncated == 0 and code == 0.0
    assert _numbers(summaries["parameters-cell.html"])[0] == 0.0
    assert _numbers(summaries["hidden-code.html"])[0] == 0.0
    assert _numbers(summaries["dimensions-footer.html"])[3] == 0


@needs_chromium
def test_each_page_rule_fails_with_the_element_named(layout_site, capsys):
    summaries: dict[str, str] = {}
    rc, problems = _run(layout_site["bad"], capsys, summaries)
    assert rc == 1
    assert set(problems) == {p.name for p in layout_site["bad"].glob("*.html")}

    [rows] = problems["truncated-rows.html"]
    assert rows.startswith("truncated pandas table: table 1 of the page (output of code cell 1; under \"Chapter\"; columns bytes_0")
    assert 'a row of "..." cells, footer "60 rows × 3 columns"' in rows
    [columns] = problems["truncated-columns.html"]
    assert columns.endswith('shows a column of "..." cells')
    assert _numbers(summaries["truncated-columns.html"])[3] == 1

    wide = problems["wide-table.html"]
    assert len(wide) == 2, wide
    assert all(p.startswith("table wider than the content column, outside a scroll container: table ") for p in wide)
    assert "the column 784 px (only the theme's wrapper of every output scrolls)" in wide[0]
    assert wide[1].startswith("table wider than the content column, outside a scroll container: table 2 of the page")
    assert wide[1].endswith("(its scroll container div is 1200 px wide, not within the column)")

    [code] = problems["too-much-code.html"]
    share = _numbers(summaries["too-much-code.html"])[0]
    assert share > 3 and code.startswith(f"visible code is {share:.1f} % of the page's height (")
    assert "limit 3 %): 3 code cell inputs shown; tallest code cell 1 (" in code
    # The same pages as the passing ones, but with the parameters tag left off, or the toggles opened.
    assert problems["parameters-untagged.html"][0].startswith("visible code is ")
    assert "4 code cell inputs shown" in problems["hidden-code-opened.html"][0]


def test_layout_rules_on_measurements():
    """The page rules on LAYOUT_PROBE's numbers, without a browser."""
    def table(**kw):
        base = dict(index=1, id="", cell=2, under="Plan", columns=["a"], ncolumns=1, width=500.0, scroller=None,
                    inThemeWrapper=True, dotRow=False, dotCol=False, trimmed=False, footer=None)
        return base | kw

    def layout(code, tables=()):
        return {"viewport": 1400, "column": {"width": 784.0}, "docHeight": 10000, "code": code, "tables": list(tables)}

    def cell(height, parameters=False):
        return {"cell": 1, "height": height, "parameters": parameters, "collapsed": False, "first": "x = 1"}

    limit = check_site.MAX_CODE_SHARE * 10000
    r = check_site.PageResult("p.html")
    assert check_site.layout_problems(layout([cell(limit - 1), cell(5000, parameters=True)]), r) == []
    assert r.code_share == pytest.approx((limit - 1) / 10000)
    r = check_site.PageResult("p.html")
    [problem] = check_site.layout_problems(layout([cell(limit / 2), cell(limit / 2 + 1)]), r)
    assert problem.startswith("visible code is 3.0 % of the page's height (301 of 10,000 px; limit 3 %)")

    r = check_site.PageResult("p.html")
    tables = [table(width=785.5), table(index=2, width=2000, scroller="div.pdcalc-scroll"), table(index=3, width=784.4)]
    [problem] = check_site.layout_problems(layout([], tables), r)
    assert problem.startswith("table wider than the content column, outside a scroll container: "
                              'table 1 of the page (output of code cell 2; under "Plan"; columns a) is 786 px wide')
    assert (r.widest_table, r.column_width, r.truncated_tables) == (2000, 784.0, 0)

    r = check_site.PageResult("p.html")
    [problem] = check_site.layout_problems(layout([], [table(id="T_x", trimmed=True, footer="9 rows × 2 columns")]), r)
    assert problem == ('truncated pandas table: table #T_x (output of code cell 2; under "Plan"; columns a) shows '
                       'Styler row_trim/col_trim cells, footer "9 rows × 2 columns"')
    assert r.truncated_tables == 1
    assert check_site.layout_problems({**layout([]), "viewport": 800}, check_site.PageResult("p.html")) == [
        "measured in a window 800 px wide, not 1400 px"]
