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


def test_whole_numbers_lose_their_empty_decimals():
    # A column whose small values need two decimals: its whole numbers of two or more digits, and zero, print
    # without ".00" (73,700, not 73,700.00); a single digit keeps them (a ratio of 1.00 reads as three figures).
    df = pd.DataFrame({"tokens/s": [73700.0, 36.906, 1943.0, 0.0, 5.25], "ratio": [1.0, 0.935, 1.2, 2.0, 0.5]})
    cells = _cells(table_html(df))
    assert cells[0::2] == ["73,700", "36.91", "1,943", "0", "5.25"]
    assert cells[1::2] == ["1.000", "0.935", "1.200", "2.000", "0.500"]
    assert not re.search(r"\d{2}\.00|(?<![\d,])0\.00", table_html(df))


def test_a_wide_table_says_why_and_quotes_are_marked():
    from pdcalc.book.display import QUOTE_CLASS, WIDE_CLASS, WIDE_WHY_CLASS

    df = pd.DataFrame({"measurement": ["a"], "quote": ["took 21.00GiB"], "x": [1.5]})
    h = table_html(df, caption="weights", wide="one column per card of the group", quotes=("quote",))
    assert f'<table class="dataframe pdcalc {WIDE_CLASS}">' in h
    assert (f'<caption>weights<br><span class="{WIDE_WHY_CLASS}">Wide table, scroll sideways: one column per card '
            "of the group</span></caption>") in h
    assert f'<span class="{QUOTE_CLASS}">took 21.00GiB</span>' in h and WIDE_CLASS not in table_html(df)
    assert f'<span class="{WIDE_WHY_CLASS}">' in table_html(df, wide="no caption, a reason all the same")


def test_ready_texts_replace_a_column_in_the_table_and_its_csv():
    df = pd.DataFrame({"tokens/s": [73700.0, 36.906]})
    h = table_html(df, csv_name="t", texts={"tokens/s": ["73,700", "36.91"]})
    assert _cells(h) == ["73,700", "36.91"] and '<td style="text-align:right">' in h
    csv = base64.b64decode(re.search(r"base64,([^\"]+)", h).group(1)).decode()
    assert csv == 'tokens/s\n"73,700"\n36.91\n'
