"""pdcalc.book.page: the standalone HTML page of an executed notebook (nbconvert), without executing anything.

The page of a real re-run (``pdcalc rerun --html``) is tested in ``test_rerun.py``.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest

from pdcalc.book import page as pg
from pdcalc.book import rerun as rr

# a mark, not importorskip: test_rerun.py imports page_text from here
pytestmark = pytest.mark.skipif(importlib.util.find_spec("nbconvert") is None, reason="needs nbconvert")


def page_text(page: str) -> str:
    """The words of an HTML page: scripts, styles and tags dropped, entities decoded, spaces collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def glue_record(name: str, **data) -> dict:
    """An output as ``myst_nb.glue(name, value, display=False)`` leaves it."""
    prefix = "application/papermill.record/"
    return nbformat.v4.new_output("display_data", data={prefix + k: v for k, v in data.items()},
                                  metadata={"scrapbook": {"name": name, "mime_prefix": prefix}})


def stream(text: str, name: str = "stdout") -> dict:
    return nbformat.v4.new_output("stream", name=name, text=text)


def code(source: str, outputs=(), tags=()) -> dict:
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs, cell.metadata["tags"] = list(outputs), list(tags)
    return cell


FAKE_CHART = """<div id="altair-viz-0123abcd"></div><script type="text/javascript">
  var VEGA_DEBUG = (typeof VEGA_DEBUG == "undefined") ? {} : VEGA_DEBUG;
  const paths = {"vega": "https://cdn.jsdelivr.net/npm/vega@6?noext",
                 "vega-lite": "https://cdn.jsdelivr.net/npm/vega-lite@6.4.1?noext"};
  maybeLoadScript("vega", "6").then(() => maybeLoadScript("vega-lite", "6.4.1"))
    .then(() => maybeLoadScript("vega-embed", "7")).then(() => vegaEmbed(outputDiv, spec, embedOpt));
</script>"""

MYST = r"""# A synthetic chapter

(sec-a)=
Value {glue:text}`speed:.1f` tok/s, label {glue:text}`label`, any {glue:}`count`, html {glue}`table`,
md {glue:md}`note`, missing {glue:text}`nope:.2f`, equation {eq}`eq-one`, function {py:func}`pdcalc.perf.step.step`,
short {py:func}`~pdcalc.perf.step.step`.
% a MyST comment

```{math}
:label: eq-one
a = b \\ c = d
```

```{note}
A note with {glue:text}`speed:.0f` inside.
```

:::{admonition} Careful
:class: warning
Colon fence *body*.
:::

```{admonition} More
:class: dropdown
Folded body.
```
"""


@pytest.fixture(scope="module")
def synthetic_page(tmp_path_factory) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"parameters": {"x": 2}, "input_path": "/elsewhere/synthetic.ipynb"}
    nb.cells = [
        code("x = 2", tags=["injected-parameters"]),
        nbformat.v4.new_markdown_cell(MYST),
        code("glue('speed', 123.456)", [glue_record("speed", **{"text/plain": "123.456"}),
                                        glue_record("label", **{"text/plain": "'v4 <b>&'"}),
                                        glue_record("count", **{"text/plain": "42"}),
                                        glue_record("table", **{"text/html": "<b>bold</b>", "text/plain": "x"}),
                                        glue_record("note", **{"text/markdown": "**md**", "text/plain": "x"})],
             tags=["remove-cell"]),
        code("print('gone source')", [stream("visible output text")], tags=["remove-input"]),
        code("secret_source = 1", [stream("folded input's output")], tags=["hide-input"]),
        code("kept_source = 2", [stream("dropped output")], tags=["remove-output"]),
        code("both = 3", [stream("out-ok"), stream("err-dropped", "stderr")], tags=["remove-stderr"]),
        code("fold = 4", [stream("folded output")], tags=["hide-output"]),
        code("chart", [nbformat.v4.new_output("display_data", data={"text/html": FAKE_CHART, "text/plain": "c"})]),
    ]
    src = tmp_path_factory.mktemp("page") / "synthetic.ipynb"
    nbformat.write(nb, src)
    return pg.write_html(src, src.with_suffix(".html")).read_text(encoding="utf-8")


def test_html_page_shows_glued_values_and_myst_as_the_book(synthetic_page):
    page, text = synthetic_page, page_text(synthetic_page)
    assert "Value 123.5 tok/s, label v4 <b>&, any 42, html" in text and "missing nope:.2f , equation (1)" in text
    assert "&lt;b&gt;" in page and "<b>bold</b>" in page and "<strong>md</strong>" in page
    assert '<code class="glue-missing">nope:.2f</code>' in page
    assert "equation (1)" in text and "\\tag{1}" in page and "\\begin{split}" in page
    assert "<code>pdcalc.perf.step.step</code>" in page and "short <code>step</code>" in page.replace("\n", " ")
    assert "{glue" not in text and "{eq}" not in text and "{py:func}" not in text and "```" not in text
    assert "(sec-a)=" not in text and "MyST comment" not in text and ":class:" not in text
    assert '<div class="admonition note"><p class="admonition-title">Note</p>' in page and "A note with 123 inside" in text
    assert '<div class="admonition admonition warning"><p class="admonition-title">Careful</p>' in page
    assert "Colon fence <em>body</em>." in page
    assert re.search(r'<details class="admonition admonition dropdown"><summary class="admonition-title">More'
                     r'</summary>\s*<p>Folded body.</p>', page)
    assert "Re-run of synthetic.ipynb with x = 2 (pdcalc rerun)." in text
    assert "parameters of this run (injected by pdcalc rerun)" in text


def test_html_page_treats_tagged_cells_as_the_book(synthetic_page):
    page, text = synthetic_page, page_text(synthetic_page)
    assert "glue('speed'" not in text                                   # remove-cell
    assert "visible output text" in text and "gone source" not in text  # remove-input
    assert re.search(r'<details class="pdcalc-hidden"><summary>Show code</summary>.*?secret_source.*?</details>',
                     page, re.S) and "folded input's output" in text     # hide-input
    assert "kept_source" in text and "dropped output" not in text       # remove-output
    assert "out-ok" in text and "err-dropped" not in text               # remove-stderr
    assert re.search(r'<details class="pdcalc-hidden"><summary>Show output</summary>.*?folded output', page, re.S)


def test_html_page_draws_charts_and_math_offline(synthetic_page):
    page = synthetic_page
    preset = re.search(r"window\.VEGA_DEBUG = Object\.assign\(window\.VEGA_DEBUG \|\| \{\}, (\{.*?\})\);", page)
    assert json.loads(preset.group(1)) == {"vega_version": "6", "vegaembed_version": "7", "vegalite_version": "6.4.1"}
    assert "window.vegaEmbed=" in page and page.index("window.vegaEmbed=") < page.index("altair-viz-0123abcd")
    assert "(bundled in this page)" in page
    assert not re.search(r"cdn\.jsdelivr|cdnjs|unpkg\.com", page)
    tags = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", page, flags=re.S | re.I)  # markup, not script text
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc\s*=|<link[^>]*\bhref\s*=", tags, re.I)
    if pg.mathjax_script() is not None:
        assert "window.MathJax = " in page and page.count("<script") >= 4


def test_html_page_without_charts_or_math_carries_no_scripts(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Plain\n\nNo math, no chart."), code("1 + 1", [stream("2")])]
    nbformat.write(nb, tmp_path / "plain.ipynb")
    page = pg.write_html(tmp_path / "plain.ipynb", tmp_path / "out" / "plain.html").read_text(encoding="utf-8")
    assert "<script" not in page and "Re-run of plain.ipynb with its default parameters" in page_text(page)
    assert "<title>Plain</title>" in page


def test_html_renderer_is_nbconvert_and_the_hand_written_one_is_gone():
    for name in ("_myst_to_markdown", "_markdown_html", "_code_html", "_pygments_css", "_output_html", "_CSS"):
        assert not hasattr(pg, name) and not hasattr(rr, name)
    source = Path(pg.__file__).read_text(encoding="utf-8")
    assert "markdown_it" not in source and "mdit_py_plugins" not in source and "pygments" not in source
    assert "HTMLExporter" in source
