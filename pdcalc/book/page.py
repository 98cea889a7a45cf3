"""The standalone HTML page of an executed chapter (``pdcalc rerun --html``): one file, drawn offline.

:func:`write_html` renders an executed notebook with nbconvert's ``HTMLExporter`` as the book shows it:
MyST glue roles and directives with the run's glued values, admonitions and numbered equations
(:class:`MystMarkdown`), the book's remove-* and hide-* cell tags; Altair charts drawn by an inlined
vega bundle (:func:`vega_bundle`), math by an inlined MathJax (:func:`mathjax_script`), local images
embedded. The page requests nothing. :func:`pdcalc.book.rerun.rerun` writes it after a re-run (``html=True``)
and reads notebooks with this module's helpers; errors are :class:`~pdcalc.core.errors.RerunError`.
"""

from __future__ import annotations

import html as _html
import json
import re
from pathlib import Path

from pdcalc.book.myst import MystMarkdown, glue_records, is_glue_record, text_of
from pdcalc.core.errors import RerunError


# ---- notebooks and errors (pdcalc.book.rerun reads its notebooks with these too) ------------------
def need(module: str, package: str):
    """Import ``module`` or raise :class:`RerunError` naming the extra that installs ``package``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RerunError(f"pdcalc rerun needs {package}: pip install 'pdcalc[book]'") from None


def read_notebook(path: Path):
    nbformat = need("nbformat", "nbformat")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a user error here
        raise RerunError(f"{path}: not a readable notebook ({type(exc).__name__}: {exc})") from None


def error_reason(exc: BaseException) -> str:
    """An OS error's own words (``Permission denied``), else its message."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


# ---- charts and math, offline ----------------------------------------------------------------
#: Markers of an Altair chart in an output (as in ``book/_ext/vega_offline.py``).
CHART_MARKERS = ("altair-viz-", "vegaEmbed(")
_CDN_URL = re.compile(r"""(["'])https?://cdn\.jsdelivr\.net/[^"']*\1""")
_CDN_URL_ANY = re.compile(r"https?://(?:cdn\.jsdelivr\.net|cdnjs\.cloudflare\.com|unpkg\.com)/")
_ASKED = re.compile(r'maybeLoadScript\("([a-z-]+)", "([^"]+)"\)')
#: Tags of the book (Jupyter Book / MyST-NB) that drop part of a cell from the page.
REMOVE_TAGS = {"cell": ("remove-cell", "remove_cell"), "input": ("remove-input", "remove_input"),
               "output": ("remove-output", "remove_output")}
#: Tags that fold part of a code cell away (a "Show" toggle, as the book's).
HIDE_TAGS = {"cell": ("hide-cell", "hide_cell"), "input": ("hide-input", "hide_input"),
             "output": ("hide-output", "hide_output")}


def altair_versions() -> dict[str, str]:
    """The ``VEGA_DEBUG`` keys and versions Altair's HTML loader asks for (from ``altair.vegalite``)."""
    import importlib

    import altair

    display = importlib.import_module(f"altair.vegalite.{altair.SCHEMA_VERSION.split('.')[0]}.display")
    return {"vega_version": str(display.VEGA_VERSION), "vegalite_version": str(display.VEGALITE_VERSION),
            "vegaembed_version": str(display.VEGAEMBED_VERSION)}


def _inline_script(body: str) -> str:
    """JavaScript safe inside a ``<script>`` element (no ``</script`` or ``<!--`` in it)."""
    return re.sub(r"</(script)", r"<\\/\1", body, flags=re.I).replace("<!--", "<\\!--")


def vega_bundle(vegalite_version: str) -> str:
    """vega + vega-lite + vega-embed as one script for ``vegalite_version``, from ``vl_convert``.

    Wrapped in a function so that its top-level names stay private; it publishes ``window.vegaEmbed``,
    ``window.vega`` and ``window.vegaLite`` itself. Safe to inline in a ``<script>`` element.
    """
    try:
        import vl_convert
    except ImportError:
        raise RerunError("--html needs vl-convert-python: pip install 'pdcalc[book]'") from None
    available = list(vl_convert.get_vegalite_versions())
    parts = vegalite_version.lstrip("v").split(".")
    wanted = ".".join(parts[:2])
    if wanted not in available:
        same = [v for v in available if v.split(".")[0] == parts[0]]
        if not same:
            raise RerunError(f"vl-convert-python offers Vega-Lite {available}, none matches the charts' "
                             f"Vega-Lite {vegalite_version}; upgrade vl-convert-python")
        wanted = max(same, key=lambda v: tuple(int(x) for x in v.split(".")))
    body = vl_convert.javascript_bundle(vl_version=wanted)
    return "(function () {\n" + _inline_script(body) + "\n}).call(window);\n"


#: MathJax 3 files of ``sphinx-mathjax-offline`` (the book's offline math), best first: TeX in, SVG out
#: (fonts drawn as paths, so nothing else is fetched), every TeX extension built in.
MATHJAX_FILES = ("tex-svg-full.js", "tex-svg.js")
#: MathJax settings of the page: ``$``/``$$`` delimiters as the book's; no extension loading, no menu
#: (both would fetch files); code, text and HTML outputs left alone.
MATHJAX_CONFIG = {
    "tex": {"inlineMath": [["$", "$"], ["\\(", "\\)"]], "displayMath": [["$$", "$$"], ["\\[", "\\]"]],
            "processEscapes": True, "processEnvironments": True, "packages": {"[-]": ["autoload", "require"]}},
    "svg": {"fontCache": "global"},
    "options": {"enableMenu": False,
                "ignoreHtmlClass": "tex2jax_ignore|jp-CodeMirrorEditor|jp-RenderedText|jp-RenderedHTML"},
    "loader": {"load": []},
}


def mathjax_script() -> str | None:
    """MathJax 3 (TeX to SVG) from the ``sphinx-mathjax-offline`` package, inlinable; ``None`` if absent."""
    from importlib import metadata

    try:
        files = metadata.distribution("sphinx-mathjax-offline").files or []
    except metadata.PackageNotFoundError:
        return None
    for name in MATHJAX_FILES:
        for file in files:
            if file.name == name and "mathjax" in file.parts:
                path = Path(file.locate())
                if path.is_file():  # addresses of optional parts it would fetch (speech rules...) made inert
                    return _CDN_URL_ANY.sub("about:blank#offline/", _inline_script(path.read_text(encoding="utf-8")))
    return None


# ---- nbconvert ---------------------------------------------------------------------------------
def _preprocessors():
    """nbconvert preprocessors of the page (nbconvert imported only when a page is written)."""
    from nbconvert.preprocessors import Preprocessor
    from traitlets import Any as AnyTrait

    class MystPreprocessor(Preprocessor):
        """MyST Markdown as Markdown (:class:`MystMarkdown`), glue records dropped from code cells,
        the book's remove-stdout/remove-stderr tags applied; MathJax added when a page has math."""

        glued = AnyTrait(default_value={})

        def preprocess(self, nb, resources):
            markdown = [c for c in nb.cells if c.cell_type == "markdown"]
            folder = resources.get("metadata", {}).get("path")
            myst = MystMarkdown(self.glued, MystMarkdown.equation_labels([c.source for c in markdown]),
                                Path(folder) if folder else None)
            for cell in markdown:
                cell.source = myst.convert(cell.source)
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                tags = set(cell.get("metadata", {}).get("tags", []))
                cell.outputs = [o for o in cell.get("outputs", []) if not is_glue_record(o)
                                and not (o.get("output_type") == "stream" and f"remove-{o.get('name')}" in tags)]
            if any(re.search(r"\$|\\\(|\\\[|\\begin\{", c.source) for c in markdown) or any(
                    "text/latex" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])):
                script = mathjax_script()
                if script:
                    resources.setdefault("pdcalc_head", []).extend([
                        f"<script>window.MathJax = {json.dumps(MATHJAX_CONFIG)};</script>",
                        f"<script>{script}</script>"])
            return nb, resources

    class OfflineChartsPreprocessor(Preprocessor):
        """Altair charts drawn offline: the vega bundle inlined, ``VEGA_DEBUG`` preset with the versions
        the charts ask for (Altair's loader then uses the bundle), the charts' CDN addresses removed."""

        def preprocess(self, nb, resources):
            asked: dict[str, str] = {}
            for cell in nb.cells:
                for output in cell.get("outputs", []):
                    data = output.get("data", {})
                    html = text_of(data.get("text/html", ""))
                    if any(marker in html for marker in CHART_MARKERS):
                        asked.update({f"{lib.replace('-', '', 1)}_version": v for lib, v in _ASKED.findall(html)})
                        data["text/html"] = _CDN_URL.sub(r"\1(bundled in this page)\1", html)
            if asked or resources.get("pdcalc_charts"):
                versions = asked or altair_versions()
                preset = (f"window.VEGA_DEBUG = Object.assign(window.VEGA_DEBUG || {{}}, "
                          f"{json.dumps(versions, sort_keys=True)});")
                bundle = vega_bundle(versions.get("vegalite_version") or altair_versions()["vegalite_version"])
                resources.setdefault("pdcalc_head", [])[:0] = [f"<script>{preset}</script>", f"<script>{bundle}</script>"]
            return nb, resources

    return MystPreprocessor, OfflineChartsPreprocessor


#: The page's template: nbconvert's ``lab`` page without its CDN scripts (require.js, MathJax,
#: mermaid, widgets), with this run's scripts, a summary of the run, the injected parameters marked,
#: and the book's hide-* tags as ``<details>`` toggles.
PAGE_TEMPLATE = r"""
{%- extends 'index.html.j2' -%}
{%- macro has_tag(cell, names) -%}{%- for t in cell.metadata.get('tags', []) if t in names -%}y{%- endfor -%}{%- endmacro -%}
{%- block html_head_js -%}
{{ resources.get('pdcalc_head', []) | join('\n') }}
{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block extra_css %}<style type="text/css">{{ resources.pdcalc_css }}</style>{% endblock extra_css %}
{%- block body_header -%}
{{ super() }}
{{ resources.get('pdcalc_summary', '') }}
{%- endblock body_header -%}
{% block codecell %}
{%- if has_tag(cell, resources.pdcalc_hide.cell) -%}
<details class="pdcalc-hidden"><summary>Show code cell</summary>{{ super() }}</details>
{%- elif 'injected-parameters' in cell.metadata.get('tags', []) -%}
<div class="pdcalc-injected"><div class="pdcalc-injected-label">parameters of this run (injected by pdcalc rerun)</div>{{ super() }}</div>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock codecell %}
{% block input_group -%}
{%- if has_tag(cell, resources.pdcalc_hide.input) -%}
<details class="pdcalc-hidden"><summary>Show code</summary>{{ super() }}</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock input_group %}
{% block output_group -%}
{%- if has_tag(cell, resources.pdcalc_hide.output) -%}
<details class="pdcalc-hidden"><summary>Show output</summary>{{ super() }}</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock output_group %}
"""

PAGE_CSS = """
main { max-width: 1150px; margin: 0 auto; padding: 1em; }
.pdcalc-run { background: #f3f6fa; border: 1px solid #cfd8e3; padding: .6em 1em; border-radius: 4px;
              font-family: var(--jp-content-font-family); }
.pdcalc-injected { border-left: 4px solid #d08000; padding-left: .5em; }
.pdcalc-injected-label { font-size: .85em; color: #a06000; font-family: var(--jp-ui-font-family); }
details.pdcalc-hidden > summary { cursor: pointer; color: #555; font-size: .9em; margin: .3em 0; }
.jp-RenderedHTMLCommon .admonition { border-left: 4px solid #3a7; background: #f2fbf6; padding: .1em 1em;
                                     margin: 1em 0; border-radius: 3px; }
.jp-RenderedHTMLCommon .admonition.warning, .jp-RenderedHTMLCommon .admonition.caution,
.jp-RenderedHTMLCommon .admonition.attention { border-color: #d08000; background: #fff8ec; }
.jp-RenderedHTMLCommon .admonition.danger, .jp-RenderedHTMLCommon .admonition.error
{ border-color: #c33; background: #fdecec; }
.jp-RenderedHTMLCommon .admonition.note, .jp-RenderedHTMLCommon .admonition.important,
.jp-RenderedHTMLCommon .admonition.seealso { border-color: #3b7dd8; background: #eef5fd; }
.jp-RenderedHTMLCommon .admonition-title { font-weight: bold; margin: .5em 0; }
.jp-RenderedHTMLCommon code.glue-missing { color: #a00; }
.jp-MarkdownOutput.jp-RenderedHTMLCommon { overflow-y: hidden; }
mjx-container[display="true"] { overflow-x: auto; overflow-y: hidden; padding: 2px 0; }
"""


def _html_exporter(glued: dict[str, dict]):
    nbconvert = need("nbconvert", "nbconvert")
    from jinja2 import DictLoader
    from traitlets.config import Config

    config = Config()
    config.HTMLExporter.template_name = "lab"
    config.HTMLExporter.theme = "light"
    # nbconvert's embed_images re-parses every HTML block alone (closing the admonitions' <div> early):
    # MystMarkdown embeds the chapters' local images itself.
    config.HTMLExporter.embed_images = False
    config.HTMLExporter.exclude_input_prompt = True
    config.HTMLExporter.exclude_output_prompt = True
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_cell_tags = set(REMOVE_TAGS["cell"])
    config.TagRemovePreprocessor.remove_input_tags = set(REMOVE_TAGS["input"])
    config.TagRemovePreprocessor.remove_all_outputs_tags = set(REMOVE_TAGS["output"])
    exporter = nbconvert.HTMLExporter(config=config, template_file="pdcalc-rerun.html.j2",
                                      extra_loaders=[DictLoader({"pdcalc-rerun.html.j2": PAGE_TEMPLATE})])
    myst, charts = _preprocessors()
    exporter.register_preprocessor(myst(glued=glued), enabled=True)
    exporter.register_preprocessor(charts(), enabled=True)
    return exporter


def _run_summary(nb, notebook: Path) -> str:
    pm = nb.metadata.get("papermill", {})
    params = pm.get("parameters") or {}
    shown = ", ".join(f"<code>{_html.escape(k)} = {_html.escape(repr(v))}</code>" for k, v in params.items())
    source = Path(str(pm.get("input_path") or notebook)).name
    return (f'<p class="pdcalc-run">Re-run of <code>{_html.escape(source)}</code> with '
            f'{shown or "its default parameters"} (pdcalc rerun).</p>')


def write_html(notebook: str | Path, html_path: str | Path) -> Path:
    """Write a standalone HTML page of an executed chapter, with charts that draw offline.

    nbconvert's ``HTMLExporter`` (its ``lab`` page) renders the notebook, with:

    - MyST as the book shows it (:class:`MystMarkdown`): ``{glue:text}``, ``{glue:}``, ``{glue:md}``
      and the glue directives show the executed notebook's glued values; admonitions are boxes;
      labelled equations are numbered and ``{eq}`` shows the number;
    - the book's cell tags: ``remove-cell``/``remove-input``/``remove-output`` (and ``remove-stdout``,
      ``remove-stderr``) drop that part, ``hide-cell``/``hide-input``/``hide-output`` fold it behind a
      "Show" toggle;
    - Altair charts drawn offline: the vega + vega-lite + vega-embed bundle of :func:`vega_bundle`
      inlined and ``window.VEGA_DEBUG`` preset with the versions the charts ask for, so Altair's loader
      uses the bundle (as ``book/_ext/vega_offline.py`` does for the book); the charts' CDN addresses
      are removed;
    - math typeset offline by MathJax from ``sphinx-mathjax-offline`` (inlined) when the page has math;
      without it, TeX is shown as written;
    - nbconvert's CDN scripts (require.js, MathJax, mermaid, widgets) left out: the page is one file
      and requests nothing.

    Parameters
    ----------
    notebook : str or Path
        An executed notebook.
    html_path : str or Path
        Where to write the page.

    Returns
    -------
    Path
        ``html_path``.

    Raises
    ------
    RerunError
        nbconvert is missing, or the page cannot be written.
    """
    notebook, html_path = Path(notebook), Path(html_path)
    nb = read_notebook(notebook)
    glued = glue_records(nb)  # before the remove-* tags drop cells: glue from a removed cell still shows
    exporter = _html_exporter(glued)
    pm = nb.metadata.get("papermill", {})
    source = Path(str(pm.get("input_path") or notebook))
    folder = source.parent if source.parent.is_dir() else notebook.parent
    resources = {"metadata": {"name": _chapter_title(nb) or notebook.stem, "path": str(folder)},
                 "pdcalc_summary": _run_summary(nb, notebook), "pdcalc_css": PAGE_CSS,
                 "pdcalc_hide": {k: list(v) for k, v in HIDE_TAGS.items()}}
    page, _ = exporter.from_notebook_node(nb, resources=resources)
    try:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise RerunError(f"{html_path}: cannot write the page ({error_reason(exc)})") from None
    return html_path


def _chapter_title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""
