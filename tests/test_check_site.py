"""tools/check_site.py must fail on a broken page and pass on a good one.

A tiny fake site is built in a temporary folder: the offline vega bundle made by
book/_ext/vega_offline.py, and pages holding real Altair HTML output, one per way a page can
break (a chart whose spec is broken, the bundle fetched from a CDN, a request made by a worker,
a file outside the site, a notebook traceback). A second set of pages copies the book's layout
(a content column 784 px wide in a 1400 px window, myst-nb's cell markup and CSS, the theme's
overflow wrapper around every output) and holds real pandas HTML output, one page per way the
page rules can break (a truncated table, a table wider than the column, a wide table that scrolls
but does not say why, too much visible code, numbers printed with ``.00``, raw MyST or Python
syntax in prose) and pages that keep them (a wide table in a scroll container that says why, a
parameters cell, hidden code, numbers at their precision, quotes and code left alone).
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


WHY = "one column per byte count of the frame, all compared along a row"


def _marked(table: str, why: str = WHY) -> str:
    """A pandas table marked as wide on purpose: the class, and the reason in a visible caption line."""
    reason = f'<caption><span class="pdcalc-wide-why">{why}</span></caption>' if why else ""
    return table.replace('<table border="1" class="dataframe">', f'<table border="1" class="dataframe pdcalc-wide">{reason}', 1)


# Text the rules (h) and (i) read, and text they leave alone.
CLEAN_TEXT = (
    "<p>The P card holds 73,700 tokens/s at a ratio of 1.00 and 0.935; 2<sup>30</sup> bytes are a GiB, "
    "and <code>2**30</code> in code is code, as is <code>{term}</code>.</p>"
    '<pre>bytes / 2**30 = 73,700.00\nf(**kwargs)  `x`</pre>'
    "<p>The article prints <span class=\"pdcalc-quote\">21.00GiB</span>; vLLM logs "
    "<q>took 39.66 GB with **bold** in its README</q>. The tensor <em>ffn.experts.{expert}.w1</em> is a "
    "pattern, not a role; 12.5 % and 3.0 stay as printed; version v1.00 and 10.0.0.1 are not figures.</p>"
    '<table><thead><tr><th>x</th></tr></thead><tbody><tr><td>1.00</td></tr><tr><td>64</td></tr></tbody></table>'
)
TRAILING_ZEROS = (
    "<p>256 experts of 84.0 MiB make 21.00 GiB, and a zero shows as 0.00 %.</p>"
    "<table><thead><tr><th>measured (tokens/s)</th><th>ratio</th></tr></thead><tbody>"
    "<tr><td>73,700.00</td><td>1.2240</td></tr><tr><td>36.91</td><td>1,436.000</td></tr></tbody></table>"
)
RAW_SYNTAX = (
    "<p>A {term}<code>KV cache</code> entry holds {glue:text}<code>kb:.1f</code> KB.</p>"
    "<p>vLLM prints GB with bytes / 2**30, and the call takes **kwargs.</p>"
    "<p>The cache is `kv_bytes` per token.</p>"
    "<p>The ratio is np.float64(1.25), the rate 1.5e+07 tokens/s and {{ name }} a substitution.</p>"
)


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
            # ... and each says why it is wide: the class and a visible reason, as display.table(wide=...)
            # writes them, by hand in a scroll container of its own, or beside a scroll-output cell's table.
            "scroll-container.html": _book_page(
                prose, _cell(output=f'<div style="overflow-x: auto">{_marked(wide)}</div>', tags=("remove-input",)),
                _cell(output=display.table_html(_frame(3, 24), wide=WHY), tags=("remove-input",)),
                _cell(output=_marked(wide), tags=("remove-input", "scroll-output")),
            ),
            # Numbers at their precision, a quote in its source's style, code in code elements.
            "clean-text.html": _book_page(prose, CLEAN_TEXT),
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
            # In a scroll container within the column, but the page does not say why the table is wide: not
            # at all, with the class but no reason, or folded in a closed dropdown (a reader opens it).
            "wide-unexplained.html": _book_page(
                prose, _cell(output=display.table_html(_frame(3, 24)), tags=("remove-input",)),
                _cell(output=f'<div style="overflow-x: auto">{_marked(wide, why="")}</div>', tags=("remove-input",)),
                _cell(output=f'<details><summary>the frame</summary>{display.table_html(_frame(3, 24))}</details>',
                      tags=("remove-input",)),
            ),
            "trailing-zeros.html": _book_page(prose, TRAILING_ZEROS, _cell(output=_frame_html(2, 2, precision=2),
                                                                           tags=("remove-input",))),
            "raw-syntax.html": _book_page(prose, RAW_SYNTAX),
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
    assert column == 784 and widest > 2 * column  # wide, but each in a container that scrolls, and says why
    assert truncated == 0 and code == 0.0
    assert "3 wide  0 .00  0 raw syntax" in summaries["scroll-container.html"]
    assert "0 wide  0 .00  0 raw syntax" in summaries["clean-text.html"]
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

    unexplained = problems["wide-unexplained.html"]
    assert len(unexplained) == 3, unexplained
    assert all(p.startswith("table wider than the content column, scrolls sideways in div") for p in unexplained)
    assert "the page does not say why (class pdcalc-wide on the table and a rendered .pdcalc-wide-why" in unexplained[0]
    assert "it has the class pdcalc-wide but no rendered .pdcalc-wide-why" in unexplained[1]
    assert unexplained[2].startswith("table wider than the content column, scrolls sideways in div.pdcalc-table: "
                                     "table 3 of the page")  # folded in a closed dropdown, measured all the same

    zeros = problems["trailing-zeros.html"]
    assert _numbers(summaries["trailing-zeros.html"])[3] == 0
    assert zeros[0] == ('number printed with trailing .00: 21.00, 0.00 in <p>; under "Chapter": '
                        '"256 experts of 84.0 MiB make 21.00 GiB, and a zero shows as 0.00 %."')
    assert zeros[1].startswith('number printed with trailing .00: 73,700.00 in table 1 of the page, row 1, '
                               'column "measured (tokens/s)"')
    assert any("1,436.000 in table 1 of the page, row 2, column \"ratio\"" in z for z in zeros)
    # four numbers, all in the hand-written prose and table; pandas's own HTML at two decimals (123456.79) passes
    assert "4 .00  0 raw syntax" in summaries["trailing-zeros.html"]

    raw = " | ".join(problems["raw-syntax.html"])
    for what, text in (("a MyST role or directive name", "'{term}', '{glue:text}'"),
                       ("Python's ** (power, keyword unpacking) or unrendered bold", "'**'"), ("a backtick", "'`'"),
                       ("a numpy repr", "'np.float64('"), ("a Python float in e notation", "'1.5e+07'"),
                       ("a MyST substitution brace", "'{{', '}}'")):
        assert f"raw syntax in rendered text ({what}): {text} in <p>" in raw, (what, text)
    assert "bytes / 2**30, and the call takes **kwargs" in raw and "10 raw syntax" in summaries["raw-syntax.html"]

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
    why = "one column per card of the group"
    tables = [table(width=785.5), table(index=2, width=2000, scroller="div.pdcalc-table", marked=True, why=why),
              table(index=3, width=784.4),
              # in a scroll container, but not said why: no class, the class and no reason, a reason too short
              table(index=4, width=900, scroller="div.pdcalc-table"),
              table(index=5, width=900, scroller="div.pdcalc-table", marked=True, why=""),
              table(index=6, width=900, scroller="div.pdcalc-table", marked=True, why="wide table")]
    outside, *unsaid = check_site.layout_problems(layout([], tables), r)
    assert outside.startswith("table wider than the content column, outside a scroll container: "
                              'table 1 of the page (output of code cell 2; under "Plan"; columns a) is 786 px wide')
    assert [p.split(": table ")[1][:1] for p in unsaid] == ["4", "5", "6"]
    assert unsaid[0].endswith("the page does not say why (class pdcalc-wide on the table and a rendered "
                              ".pdcalc-wide-why reason, as pdcalc.book.display.table(df, wide=...) writes them)")
    assert "it has the class pdcalc-wide but no rendered .pdcalc-wide-why of at least 3 words" in unsaid[1]
    assert unsaid[2].endswith("says why (only: 'wide table')")
    assert (r.widest_table, r.column_width, r.truncated_tables, r.wide_tables) == (2000, 784.0, 0, 5)

    r = check_site.PageResult("p.html")
    [problem] = check_site.layout_problems(layout([], [table(id="T_x", trimmed=True, footer="9 rows × 2 columns")]), r)
    assert problem == ('truncated pandas table: table #T_x (output of code cell 2; under "Plan"; columns a) shows '
                       'Styler row_trim/col_trim cells, footer "9 rows × 2 columns"')
    assert r.truncated_tables == 1
    assert check_site.layout_problems({**layout([]), "viewport": 800}, check_site.PageResult("p.html")) == [
        "measured in a window 800 px wide, not 1400 px"]


def test_text_rules_on_blocks():
    """Rules (h) and (i) on LAYOUT_PROBE's text blocks, without a browser: what each pattern takes and leaves."""
    def problems(text, **where):
        r = check_site.PageResult("p.html")
        out = check_site.text_problems([{"text": text, "tag": "p", "cell": 0, "under": "Weights"} | where], r)
        return out, r

    for text in ("73,700.00 tokens/s", "12.00 GiB", "a share of 0.00", "0.000", "1,436.000", "(21.00)"):
        [p], r = problems(text)
        assert p.startswith("number printed with trailing .00: ") and r.trailing_zeros == 1, text
    for text in ("1.00", "0.935", "73,700", "12.5 %", "3.0", "v1.00", "10.0.0.1", "2.000", "100.01", "0.001"):
        assert problems(text)[0] == [], text
    [p], r = problems("6,688.00 and 73,700.00", table=10, tableId="", row=3, column="measured (tokens/s)")
    assert p == ('number printed with trailing .00: 6,688.00, 73,700.00 in table 10 of the page, row 3, column '
                 '"measured (tokens/s)"; under "Weights": "6,688.00 and 73,700.00"')
    assert r.trailing_zeros == 2

    for text, what in (("a {term} entry", "a MyST role or directive name"), ("{glue:text} GB", "a MyST role or directive name"),
                       ("{doc} page", "a MyST role or directive name"), ("{{ x }}", "a MyST substitution brace"),
                       ("bytes / 2**30", "Python's ** (power, keyword unpacking) or unrendered bold"),
                       ("10**9 B", "Python's ** (power, keyword unpacking) or unrendered bold"),
                       ("f(**kwargs)", "Python's ** (power, keyword unpacking) or unrendered bold"),
                       ("the `kv` cache", "a backtick"), ("np.float64(0.5)", "a numpy repr"),
                       ("1.5e+07 tokens/s", "a Python float in e notation"), ("2.34e+03 to 6.37e+03", "a Python float in e notation")):
        [p], r = problems(text)
        assert p.startswith(f"raw syntax in rendered text ({what}): ") and r.raw_syntax >= 1, text
    for text in ("ffn.experts.{expert}.w1", "2^30 bytes", "GiB (2 to the 30th)", "a * b", "e+ and e-", "1e3x",
                 "set {x, y}", "DeepSeek-V3 (TP8)"):
        assert problems(text)[0] == [], text
    long = "x" * 100 + " bytes / 2**30 " + "y" * 100
    [p], _ = problems(long)
    excerpt = p.split(': "', 1)[1]
    assert excerpt.startswith("…x") and excerpt.endswith("y…\"") and "bytes / 2**30" in excerpt
    assert len(excerpt) <= 2 * check_site.TEXT_CONTEXT + 6


def _whatif_html(*, falsify: bool = False, field: str = "weights per card") -> str:
    """Real what-if output (pdcalc.book.whatif) over two EP groups of `pdcalc memory`, checked against the CLI; with
    ``falsify`` the page's figure for the checked setting is wrong."""
    import pandas as pd

    from pdcalc.book import whatif
    from pdcalc.core.units import GiB
    from pdcalc.layout.memory import memory_report

    rows = []
    for ep in (16, 32):
        r = memory_report("deepseek-v4-flash", "ascend-910b2", quant="w8a8-msmodelslim", ep=ep)
        w = r["weights_bytes"] * (1.5 if falsify and ep == 16 else 1.0)
        rows.append({"ep": ep, "weights per card": whatif.gib(w), "card": "ascend-910b2"})
    check = whatif.check_spec(set_values={"ep": 16}, field=field,
                              cli=["memory", "deepseek-v4-flash", "--card", "ascend-910b2", "--ep", "16", "--quant",
                                   "w8a8-msmodelslim", "--json"], json_path=["weights_bytes"], divide_by=GiB,
                              decimals=2)
    chart = whatif.whatif_table(pd.DataFrame(rows), {"ep": "EP group (cards)", "card": "card"}, ["weights per card"],
                                initial={"ep": 32, "card": "ascend-910b2"}, title="what-if", check=check)
    return chart._repr_mimebundle_()["text/html"]


@pytest.fixture(scope="module")
def whatif_site(tmp_path_factory) -> Path:
    import vega_offline

    bundle, versions = vega_offline.make_bundle()
    head = (f"<script>window.VEGA_DEBUG = {json.dumps(versions)};</script>"
            '<script src="_static/vega-offline/vega-bundle.js"></script>')
    root = tmp_path_factory.mktemp("site-whatif")
    (root / "_static" / "vega-offline").mkdir(parents=True)
    (root / "_static" / "vega-offline" / "vega-bundle.js").write_text(bundle, encoding="utf-8")
    (root / "follows.html").write_text(_page(_whatif_html(), head), encoding="utf-8")
    (root / "wrong-figure.html").write_text(_page(_whatif_html(falsify=True), head), encoding="utf-8")
    return root


@needs_chromium
def test_a_whatif_chart_must_follow_its_controls_and_agree_with_the_command_line(whatif_site, capsys):
    summaries: dict = {}
    rc, problems = _run(whatif_site, capsys, summaries)
    assert rc == 1 and "follows.html" not in problems
    assert "live 1/1" in summaries["follows.html"] and "live 0/1" in summaries["wrong-figure.html"]
    (msg,) = problems["wrong-figure.html"]
    assert "weights per card" in msg and "pdcalc memory deepseek-v4-flash" in msg


def test_live_checks_are_read_from_the_embedded_spec():
    html = _whatif_html()
    ((cid, check),) = check_site.live_checks(html)
    assert cid.startswith("altair-viz-") and check["set"] == {"ep": 16} and check["json_path"] == ["weights_bytes"]
    assert check_site.live_checks(_altair_html("no what-if")) == []
    assert check_site.shown_number("21.60 GiB") == 21.6 and check_site.shown_number("7,407") == 7407.0
