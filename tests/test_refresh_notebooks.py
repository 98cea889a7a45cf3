"""tools/refresh_notebooks.py: committed chart ids are deterministic and stay unique."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from refresh_notebooks import ALTAIR_ID, stable_addresses, stable_altair_ids  # noqa: E402

A, B = "altair-viz-" + "a" * 32, "altair-viz-" + "b" * 32


def _nb(ids_per_cell):
    nb = nbformat.v4.new_notebook()
    for ids in ids_per_cell:
        cell = nbformat.v4.new_code_cell("chart")
        html = "".join(f'<style>#{i}.vega-embed {{}}</style><div id="{i}"></div><script>"{i}"</script>' for i in ids)
        cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/html": html, "text/plain": "x"})]
        nb.cells.append(cell)
    return nb


def test_ids_are_replaced_consistently_and_deterministically():
    first, second = _nb([[A], [B]]), _nb([[B], [A]])
    assert stable_altair_ids(first, "ch.ipynb") == 2
    stable_altair_ids(second, "ch.ipynb")
    html = [c.outputs[0]["data"]["text/html"] for c in first.cells]
    assert A not in html[0] and B not in html[1]
    # one id per chart, used for its style, div and script alike
    assert len(set(ALTAIR_ID.findall(html[0]))) == 1 and len(ALTAIR_ID.findall(html[0])) == 3
    # unique across cells, and the same whatever random id Altair chose
    assert ALTAIR_ID.findall(html[0])[0] != ALTAIR_ID.findall(html[1])[0]
    assert [c.outputs[0]["data"]["text/html"] for c in second.cells] == html


def test_two_charts_in_one_output_stay_distinct():
    nb = _nb([[A, B]])
    stable_altair_ids(nb, "ch.ipynb")
    assert len(set(ALTAIR_ID.findall(nb.cells[0].outputs[0]["data"]["text/html"]))) == 2


def test_object_addresses_are_replaced():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("styler")
    cell.outputs = [nbformat.v4.new_output("execute_result", data={
        "text/plain": "<pandas.io.formats.style.Styler at 0x7f8a2908cd10>", "text/html": "<table></table>"})]
    nb.cells.append(cell)
    assert stable_addresses(nb) == 1
    assert cell.outputs[0]["data"]["text/plain"] == "<pandas.io.formats.style.Styler at 0xADDRESS>"
    assert stable_addresses(nb) == 0
