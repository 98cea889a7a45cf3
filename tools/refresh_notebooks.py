"""Re-execute the committed chapters in place, so that their outputs can be committed.

Usage: ``python tools/refresh_notebooks.py [NOTEBOOK ...]`` (default: every notebook chapter in
``_toc.yml``); ``make refresh`` runs it. Each notebook is executed with nbclient in its own
directory (``book/``), with ``record_timing=False`` and no papermill metadata, so a refresh of
unchanged code gives a diff only where outputs really changed. Altair gives every chart a random
``altair-viz-<32 hex>`` id; the refresh replaces each with one derived from the notebook name,
cell index and order (unique on the page, the same on every refresh), and an object repr's memory
address (a pandas Styler's ``<... at 0x7f...>``) becomes ``0xADDRESS``. A notebook that raises is
left untouched and the script exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbrun import REPO, execute, toc_notebooks  # noqa: E402

ALTAIR_ID = re.compile(r"altair-viz-[0-9a-f]{32}")
#: An object repr's memory address (a pandas Styler's text/plain), different on every run.
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def stable_addresses(nb) -> int:
    """Replace memory addresses in object reprs (``<... Styler at 0x7f...>``) by a fixed text; return how many."""
    count = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = data.get("text/plain")
            if isinstance(text, list):
                text = "".join(text)
            if isinstance(text, str) and ADDRESS.search(text):
                data["text/plain"] = ADDRESS.sub(" at 0xADDRESS>", text)
                count += 1
    return count


def stable_altair_ids(nb, name: str) -> int:
    """Replace Altair's random chart ids in ``nb``'s outputs by deterministic ones; return how many."""
    count = 0
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            for mime, value in data.items():
                text = "".join(value) if isinstance(value, list) else value
                if not isinstance(text, str) or not ALTAIR_ID.search(text):
                    continue
                mapping: dict[str, str] = {}
                for old in dict.fromkeys(ALTAIR_ID.findall(text)):
                    digest = hashlib.md5(f"{name}:{index}:{len(mapping)}".encode()).hexdigest()
                    mapping[old] = f"altair-viz-{digest}"
                text = ALTAIR_ID.sub(lambda m: mapping[m.group(0)], text)
                data[mime] = text
                count += len(mapping)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: all chapters in _toc.yml")
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks] or toc_notebooks()
    if not notebooks:
        print("refresh: no notebook chapters found in _toc.yml", file=sys.stderr)
        return 1
    failed = []
    for path in notebooks:
        t0 = time.perf_counter()
        try:
            nb = execute(path)
        except Exception as exc:  # noqa: BLE001 - report every failing chapter, then fail
            failed.append(path)
            print(f"refresh: FAILED {path.relative_to(REPO)}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        stable_altair_ids(nb, path.name)
        stable_addresses(nb)
        nbformat.write(nb, path)
        print(f"refresh: {path.relative_to(REPO)} re-executed in {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
