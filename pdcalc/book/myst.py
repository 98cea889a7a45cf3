"""MyST, as the book renders it, turned into the Markdown and HTML nbconvert renders: glued values, numbered
equations, admonitions and dropdowns, images embedded (the standalone page of :mod:`pdcalc.book.page`).
"""

from __future__ import annotations

import ast
import base64
import html as _html
import re
from pathlib import Path

GLUE_PREFIX = "application/papermill.record/"
_ROLE = re.compile(r"\{(?P<role>[A-Za-z][\w:.+-]*)\}`(?P<text>[^`]*)`")
_DIRECTIVE = re.compile(
    r"^(?P<indent>[ ]{0,3})(?P<fence>`{3,}|~{3,}|:{3,})[ \t]*\{(?P<name>[^}\s]+)\}[ \t]*(?P<arg>[^\n]*)\n"
    r"(?P<body>.*?)^[ ]{0,3}(?P=fence)[ \t]*$", re.M | re.S)
_DOLLAR_LABEL = re.compile(r"^\$\$[ \t]*\n(?P<body>.*?)\n\$\$[ \t]*\((?P<label>[^)\s]+)\)[ \t]*$", re.M | re.S)
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\((?P<src>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HTML_IMAGE = re.compile(r"<img\b[^>]*?\bsrc=[\"'](?P<src>[^\"']+)[\"']", re.I)
#: Largest local image embedded in a page.
MAX_IMAGE_BYTES = 20 * 2**20
_TARGET = re.compile(r"^\([^)\s]+\)=[ \t]*$\n?", re.M)
_COMMENT = re.compile(r"^%.*$\n?|^\+\+\+.*$\n?", re.M)
ADMONITIONS = {"admonition": "Note", "note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important",
               "warning": "Warning", "caution": "Caution", "attention": "Attention", "danger": "Danger",
               "error": "Error", "seealso": "See also", "todo": "To do", "margin": "", "sidebar": "", "aside": ""}
_MD_ACTIVE = set("\\`*_[]{}()#+-.!|~$<>&\"'")


def _md_text(text: str) -> str:
    """``text`` to show as is inside Markdown: every character Markdown, MyST or HTML reads as an entity."""
    return "".join(f"&#{ord(ch)};" if ch in _MD_ACTIVE else ch for ch in " ".join(str(text).splitlines()))


def glue_records(nb) -> dict[str, dict]:
    """What ``myst_nb.glue`` recorded in ``nb``'s outputs: name -> mime bundle (the record prefix removed)."""
    out: dict[str, dict] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook", {})
            if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                out[meta["name"]] = {k.removeprefix(GLUE_PREFIX): text_of(v) for k, v in output.get("data", {}).items()}
    return out


def is_glue_record(output) -> bool:
    """An output ``glue(..., display=False)`` left: data for the prose, not shown where it was made."""
    meta = output.get("metadata", {}).get("scrapbook", {})
    return isinstance(meta, dict) and "name" in meta and all(k.startswith(GLUE_PREFIX) for k in output.get("data", {}))


def format_plain_text(text: str, fmt: str) -> str:
    """A glued ``text/plain`` with a format spec, as ``{glue:text}`` shows it (``myst_nb``'s rule)."""
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        value = text
    if fmt == "":
        return str(value)
    kind = fmt[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, fmt)


def text_of(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def embedded(folder: Path | None, src: str) -> str:
    """A local image file as a ``data:`` URI (the page stays one file); anything else unchanged."""
    if folder is None or re.match(r"^[a-z][a-z0-9+.-]*:", src, re.I):
        return src
    path = (folder / src).resolve()
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
            ".svg": "image/svg+xml", ".webp": "image/webp"}.get(path.suffix.lower())
    try:
        if mime is None or not path.is_file() or path.stat().st_size > MAX_IMAGE_BYTES:
            return src
        return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"
    except OSError:
        return src



def directive_options(body: str) -> tuple[dict[str, str], str]:
    """A directive body's options (a ``---`` YAML block or ``:key: value`` lines) and the rest of the body."""
    lines = body.split("\n")
    options: dict[str, str] = {}
    if lines and lines[0].strip() == "---" and "---" in (ln.strip() for ln in lines[1:]):
        end = next(i for i, ln in enumerate(lines[1:], 1) if ln.strip() == "---")
        for ln in lines[1:end]:
            key, _, val = ln.partition(":")
            options[key.strip()] = val.strip()
        lines = lines[end + 1:]
    while lines and re.match(r"^:[\w-]+:", lines[0]):
        key, _, val = lines.pop(0)[1:].partition(":")
        options[key.strip()] = val.strip()
    return options, "\n".join(lines)



def _box(kind: str, title: str, body: str, css: str) -> str:
    classes = _html.escape(f"admonition {kind} {css}".strip())
    heading = _html.escape(title)
    if "dropdown" in css.split():
        return (f"\n<details class=\"{classes}\"><summary class=\"admonition-title\">{heading}</summary>\n\n"
                f"{body}\n\n</details>\n")
    title_html = f"<p class=\"admonition-title\">{heading}</p>" if heading else ""
    return f"\n<div class=\"{classes}\">{title_html}\n\n{body}\n\n</div>\n"



def glue_html(glued: dict[str, dict], key: str) -> str:
    """The HTML a glued value ``key`` shows as (a missing one as a marked code span)."""
    bundle = glued.get(key)
    if bundle is None:
        return f"<code class=\"glue-missing\">{_html.escape(key)}</code>"
    if "text/html" in bundle:
        return bundle["text/html"]
    for mime in ("image/png", "image/jpeg"):
        if mime in bundle:
            return f"<img src=\"data:{mime};base64,{''.join(bundle[mime].split())}\" alt=\"{_html.escape(key)}\">"
    if "image/svg+xml" in bundle:
        return bundle["image/svg+xml"]
    if "text/markdown" in bundle:
        return bundle["text/markdown"]
    if "text/latex" in bundle:
        return _md_text(bundle["text/latex"])
    return _md_text(format_plain_text(bundle.get("text/plain", ""), ""))



class MystMarkdown:
    """MyST of a chapter's Markdown cells as the Markdown + HTML nbconvert renders.

    Glue roles and directives show the executed notebook's glued values; math directives become
    ``$$`` blocks, numbered where labelled (``{eq}`` shows the number); admonitions become boxed
    ``<div>`` (``dropdown`` ones ``<details>``); other roles show their text as code; targets and
    comments are dropped.
    """

    def __init__(self, glued: dict[str, dict], labels: list[str] | None = None, folder: Path | None = None):
        self.glued = glued
        self.numbers = {label: n for n, label in enumerate(labels or [], 1)}
        self.folder = folder

    @staticmethod
    def equation_labels(sources: list[str]) -> list[str]:
        """Labels of the numbered equations of ``sources``, in order (``{math}`` with ``:label:``, ``$$ (label)``)."""
        labels: list[str] = []
        for source in sources:
            spans = [(m.start(), m.group("label")) for m in _DOLLAR_LABEL.finditer(source)]
            for m in _DIRECTIVE.finditer(source):
                if m.group("name") == "math":
                    label = directive_options(m.group("body"))[0].get("label")
                    if label:
                        spans.append((m.start(), label))
            labels += [label for _, label in sorted(spans)]
        return labels

    def convert(self, source: str) -> str:
        source = _DIRECTIVE.sub(self._directive, source)
        source = _DOLLAR_LABEL.sub(lambda m: self._math(m.group("body"), m.group("label")), source)
        source = _ROLE.sub(self._role, source)
        source = _TARGET.sub("", source)
        def embed(m):
            return m.group(0).replace(m.group("src"), embedded(self.folder, m.group("src")))

        source = _MD_IMAGE.sub(embed, source)
        source = _HTML_IMAGE.sub(embed, source)
        return _COMMENT.sub("", source)

    def _math(self, body: str, label: str | None) -> str:
        body = body.strip()
        if "\\\\" in body and "\\begin" not in body:
            body = f"\\begin{{split}}{body}\\end{{split}}"
        tag = f" \\tag{{{self.numbers[label]}}}" if label in self.numbers else ""
        return f"\n$$\n{body}{tag}\n$$\n"

    def _directive(self, m: re.Match) -> str:
        name, arg = m.group("name").lower(), m.group("arg").strip()
        options, body = directive_options(m.group("body"))
        if name == "math":
            return self._math(body, options.get("label"))
        if name in ADMONITIONS:
            title = (arg or ADMONITIONS[name] or name.capitalize()) if name == "admonition" else ADMONITIONS[name]
            if name != "admonition" and arg:
                body = f"{arg}\n{body}"
            return _box(name, title, self.convert(body), options.get("class", ""))
        if name in ("glue", "glue:", "glue:any", "glue:figure"):
            html = glue_html(self.glued, arg)
            caption = f"\n\n{self.convert(body)}" if body.strip() and name == "glue:figure" else ""
            return f"\n<div class=\"glue\">{html}</div>\n{caption}\n"
        if name == "glue:md":
            return "\n" + self.glued.get(arg.rpartition(":")[0] if ":" in arg else arg, {}).get("text/markdown", "") + "\n"
        if name == "glue:math":
            latex = self.glued.get(arg, {}).get("text/latex", "").strip().strip("$")
            return self._math(latex, options.get("label"))
        if name in ("code-block", "code", "sourcecode", "code-cell"):
            return f"\n```{arg}\n{body}\n```\n"
        if name in ("figure", "image"):
            alt = options.get("alt", "")
            caption = f"\n\n{self.convert(body)}\n" if body.strip() else ""
            return f"\n![{alt}]({arg})\n{caption}"
        if name in ("toctree", "tableofcontents", "bibliography"):
            return ""
        if name == "raw" and arg == "html":
            return f"\n{body}\n"
        return f"\n<div class=\"directive {_html.escape(name)}\">\n\n{self.convert(body)}\n\n</div>\n"

    def _role(self, m: re.Match) -> str:
        role, text = m.group("role"), m.group("text")
        if role == "glue:text":
            key, _, fmt = text.rpartition(":") if ":" in text else (text, "", "s")
            bundle = self.glued.get(key)
            if bundle is None or "text/plain" not in bundle:
                return f"<code class=\"glue-missing\">{_html.escape(text)}</code>"
            try:
                return _md_text(format_plain_text(bundle["text/plain"], fmt))
            except (ValueError, TypeError, OverflowError):
                return _md_text(bundle["text/plain"])
        if role == "glue:md":
            key = text.rpartition(":")[0] if ":" in text else text
            return self.glued.get(key, {}).get("text/markdown", f"<code class=\"glue-missing\">{_html.escape(key)}</code>")
        if role in ("glue", "glue:", "glue:any"):
            return glue_html(self.glued, text)
        if role == "eq":
            return f"({self.numbers[text]})" if text in self.numbers else f"({_md_text(text)})"
        if role == "math":
            return f"${text}$"
        if role in ("sub", "sup", "kbd"):
            return f"<{role}>{_html.escape(text)}</{role}>"
        shown = re.sub(r"\s*<[^<>]*>$", "", text) or text           # "title <target>": the title
        if role == "abbr":
            return _md_text(re.sub(r"\s*\([^()]*\)$", "", shown))
        shown = shown.lstrip("!")
        if shown.startswith("~"):
            shown = shown[1:].rpartition(".")[2]
        ticks = "``" if "`" in shown else "`"
        return f"{ticks}{shown}{ticks}"
