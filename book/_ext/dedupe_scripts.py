"""Drop repeated ``<script>`` tags from each HTML page (a local Sphinx extension).

Under Jupyter Book 1, sphinx-thebe's inline configuration script reaches every page twice (same
body, registered once with filename ``None`` and once with ``""``; sphinx-togglebutton's too), so
each page declares ``const THEBE_JS_URL`` twice and the browser throws "SyntaxError: Identifier
'THEBE_JS_URL' has already been declared". A script that differs only in priority, or in
``None`` versus ``""`` for an inline body, is never wanted twice: keep the first occurrence.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _dedupe(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set = set()
    kept = []
    for js in scripts:
        attributes = tuple(sorted(getattr(js, "attributes", {}).items()))
        key = (str(getattr(js, "filename", js) or ""), attributes)  # None and "" both mean inline
        if key in seen:
            logger.debug("dedupe_scripts: %s: dropped repeated %r", pagename, js)
            continue
        seen.add(key)
        kept.append(js)
    scripts[:] = kept  # the builder restores its own list after each page


def setup(app: Sphinx) -> dict:
    # Run after every other html-page-context handler, which may add scripts of their own.
    app.connect("html-page-context", _dedupe, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
