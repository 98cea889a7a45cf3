"""A build stamp in every page's footer (a local Sphinx extension).

Each HTML page ends with the commit the book was built from (``git rev-parse``, short hash, marked when
tracked files had uncommitted changes) and the UTC date of the build (``SOURCE_DATE_EPOCH`` when set, for
reproducible builds). Outside a git checkout, or without ``git``, the stamp says so and keeps the date;
the build never fails for it.

With the Sphinx config value ``repository_url`` set (e.g. ``https://github.com/OWNER/REPO`` under
``sphinx: config:`` in ``_config.yml``), the commit links to the repository's files at that commit
(``<url>/tree/<commit>``) and each page gets a link to its own source file there
(``<url>/blob/<commit>/<path>``). It is unset by default: the book names no repository it cannot vouch for.

The stamp is appended to the theme's ``extra_footer`` (sphinx-book-theme's ``extra-footer.html``, part of
``footer_content_items``), after any footer text ``_config.yml`` sets.
"""

from __future__ import annotations

import html
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Class of the footer paragraph (tests and the site checker can find it).
STAMP_CLASS = "pdcalc-build-stamp"


@dataclass(frozen=True)
class Stamp:
    """Where and when the book was built."""

    date: str                  # "YYYY-MM-DD HH:MM UTC"
    date_iso: str              # ISO 8601, for <time datetime=...>
    commit: str | None = None  # full hash; None outside a git checkout
    short: str | None = None   # short hash
    dirty: bool = False        # tracked files differ from the commit


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def build_date(environ: dict | None = None) -> datetime:
    """Now in UTC, or ``SOURCE_DATE_EPOCH`` (seconds since 1970, UTC) when it is set to an integer."""
    epoch = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc)
    return datetime.now(timezone.utc)


def read_stamp(folder: Path, when: datetime | None = None) -> Stamp:
    """The stamp of a build of ``folder`` at ``when`` (default :func:`build_date`)."""
    when = (when or build_date()).astimezone(timezone.utc)
    date, date_iso = when.strftime("%Y-%m-%d %H:%M UTC"), when.strftime("%Y-%m-%dT%H:%M:%SZ")
    commit = _git(folder, "rev-parse", "--verify", "HEAD")
    if not commit:
        return Stamp(date=date, date_iso=date_iso)
    short = _git(folder, "rev-parse", "--short", commit) or commit[:7]
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return Stamp(date=date, date_iso=date_iso, commit=commit, short=short, dirty=bool(status))


def stamp_html(stamp: Stamp, repository_url: str = "", source_path: str | None = None) -> str:
    """The footer paragraph. ``source_path`` (the page's source, relative to the repository root) adds a
    link to that file when ``repository_url`` is set."""
    url = repository_url.rstrip("/")
    when = f'<time datetime="{stamp.date_iso}">{html.escape(stamp.date)}</time>'
    if stamp.commit is None:
        return f'<p class="{STAMP_CLASS}">Built {when}, not from a git checkout.</p>'
    code = f"<code>{html.escape(stamp.short or stamp.commit)}</code>"
    if url:
        code = f'<a href="{html.escape(url)}/tree/{stamp.commit}">{code}</a>'
    text = f"Built {when} from commit {code}"
    if stamp.dirty:
        text += " with uncommitted changes"
    text += "."
    if url and source_path:
        # the committed file; a dirty build may show a page that differs from it, and says so above
        href = f"{html.escape(url)}/blob/{stamp.commit}/{html.escape(source_path)}"
        text += f' <a href="{href}">Source of this page</a>.'
    return f'<p class="{STAMP_CLASS}">{text}</p>'


def _valid_url(url: str) -> bool:
    return url.startswith(("https://", "http://")) and " " not in url and len(url) > len("https://")


def _builder_inited(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    app.build_stamp = read_stamp(Path(app.srcdir))  # type: ignore[attr-defined]
    url = app.config.repository_url or ""
    if url and not _valid_url(url):
        logger.warning("build_stamp: repository_url must be an http(s) URL, got %r; the stamp links nowhere", url)
        app.config.repository_url = ""
    stamp = app.build_stamp  # type: ignore[attr-defined]
    logger.info("build_stamp: %s", f"commit {stamp.short}{' (dirty)' if stamp.dirty else ''}, {stamp.date}"
                if stamp.commit else f"no git checkout, {stamp.date}")


def _page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    stamp = getattr(app, "build_stamp", None)
    if stamp is None:
        return
    source = None
    if pagename in app.env.all_docs:
        source = Path(app.env.doc2path(pagename, base=False)).as_posix()
    footer = stamp_html(stamp, app.config.repository_url or "", source)
    existing = context.get("theme_extra_footer") or ""
    context["theme_extra_footer"] = f"{existing}\n{footer}" if existing else footer


def setup(app: Sphinx) -> dict:
    app.add_config_value("repository_url", "", "html", types=[str])
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _page_context)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
