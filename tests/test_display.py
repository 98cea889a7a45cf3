import base64
import re

import numpy as np
import pandas as pd

from pdcalc.book.display import SCROLL_CLASS, slug, table, table_html
from pdcalc.core.precision import too_precise


def _cells(h: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", h)


def test_every_row_is_shown():
    df = pd.DataFrame({"card": range(200), "experts": np.arange(200) * 4})
    with pd.option_context("display.max_rows", 10):
        h = table_html(df)
    assert h.count("<tr>") == 201 and "..." not in h and "…" not in h


def test_numbers_read_well():
    df = pd.DataFrame({"count (cards)": [16.0, 32.0], "ms": [4.7001, 16.75], "tok/s": [48976.329, 1e7],
                       "ratio": [0.3800165107965131, np.nan], "fits": [True, False]})
    h = table_html(df)
    cells = _cells(h)
    assert cells[:5] == ["16", "4.70", "48,980", "0.38", "yes"]          # whole numbers as counts
    assert cells[5:] == ["32", "16.75", "10,000,000", "", "no"]
    assert "e+" not in h and "NaN" not in h and "nan" not in h and too_precise(h) == []


def test_no_index_unless_asked():
    df = pd.DataFrame({"x": [1, 2]}, index=pd.Index(["a", "b"], name="layout"))
    assert "layout" not in table_html(df) and "layout" in table_html(df, index=True)


def test_scroll_container_csv_and_anchors():
    df = pd.DataFrame({"quantity": ["KV, per token"], "value (GB)": [1.5]})
    h = table_html(df, csv_name="KV per card", row_ids=["claim-v4-6-1"], cell_html={"quantity": ["<b>KV</b>"]})
    assert h.startswith(f'<div class="{SCROLL_CLASS}" style="overflow-x:auto')
    assert '<tr id="claim-v4-6-1">' in h and "<td style=\"text-align:left\"><b>KV</b></td>" in h
    link = re.search(r'download="([^"]+)" href="data:text/csv;charset=utf-8;base64,([^"]+)"', h)
    assert link.group(1) == "kv-per-card.csv"
    assert base64.b64decode(link.group(2)).decode() == 'quantity,value (GB)\n"KV, per token",1.5\n'


def test_deterministic_and_escaped():
    df = pd.DataFrame({"a<b": ["x & y"], "n": [1]})
    assert table_html(df) == table_html(df)
    assert "a&lt;b" in table_html(df) and "x &amp; y" in table_html(df)
    assert table(df, caption="T").data == table_html(df, caption="T", csv_name="T")
    assert slug("P vs D weights (5.5 P/D 权重对比总结)") == "p-vs-d-weights-5-5-p-d"
