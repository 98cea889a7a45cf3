"""Re-execute the committed chapters in place, so that their outputs can be committed.

Usage: ``python tools/refresh_notebooks.py [NOTEBOOK ...]`` (default: every notebook chapter in
``_toc.yml``); ``make refresh`` runs it. Each notebook is executed with nbclient in its own
directory (``book/``), with ``record_timing=False`` and no papermill metadata, so a refresh of
unchanged code gives a diff only where outputs really changed (plus Altair's random chart ids,
which nbval sanitizes). A notebook that raises is left untouched and the script exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbrun import REPO, execute, toc_notebooks  # noqa: E402


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
        nbformat.write(nb, path)
        print(f"refresh: {path.relative_to(REPO)} re-executed in {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
