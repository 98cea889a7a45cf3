"""tools/check_site.py must fail on a broken page and pass on a good one.

A tiny fake site is built in a temporary folder: the offline vega bundle made by
book/_ext/vega_offline.py, and pages holding real Altair HTML output, one per way a page can
break (a chart whose spec is broken, the bundle fetched from a CDN, a request made by a worker,
a file outside the site, a notebook traceback). The browser tests need /usr/bin/chromium and
are skipped, with that reason, only when it is absent.
"""

from __future__ import annotations

import json
import os
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


def _run(site: Path, capsys) -> tuple[int, dict[str, list[str]]]:
    rc = check_site.main([str(site), "--chart-timeout", "5", "--jobs", "2"])
    out = capsys.readouterr().out
    print(out)  # shown by pytest on failure
    problems: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("check-site: FAIL "):
            page, _, msg = line[len("check-site: FAIL "):].partition(": ")
            problems.setdefault(page, []).append(msg)
    return rc, problems


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
