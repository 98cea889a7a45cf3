"""Re-run a chapter of the book with other parameter values (``pdcalc rerun``).

Every notebook chapter starts with a cell tagged ``parameters``: plain assignments of literals,
each with a comment saying what it is. :func:`rerun` executes a *copy* of a chapter with papermill,
the new values injected after that cell, in the chapter's own directory (``book/``, as Jupyter
Book and nbval run it), and writes the executed copy to an output folder outside ``book/``. With
``html=True`` it also writes a standalone HTML page of the result, whose Altair charts and math draw
offline (:func:`pdcalc.book.page.write_html`, nbconvert's ``HTMLExporter``). The committed chapters are only read.

Everything is checked before anything runs: the output folder (:func:`rerun`) and the parameters
(:func:`validate`). The name must be one of the chapter's, the value must have the type of the
default (a ``None`` default accepts ``None`` or what its validator allows), and every parameter is
checked against pdcalc itself (:data:`VALIDATORS`, with the rules of :mod:`pdcalc.core.checks` that the
command line's flags follow): presets must exist, numbers be finite, fractions lie in (0, 1], an EP
group must be able to hold the model's routed experts, and so on; then combinations
(:data:`CROSS_CHECKS`): a card must have the peak FLOP/s a chapter's throughput needs for its
scheme, a rate and a concurrency exclude each other... papermill alone accepts any name and any
value. Errors are one line (:class:`ParameterError`, :class:`RerunError`: exit status 2 on the
command line; :class:`ChapterFailed`, a cell that raised: exit status 1).

Examples
--------
>>> from pdcalc.book.rerun import rerun  # doctest: +SKIP
>>> result = rerun("per_card", {"card": "ascend-910b4-32g", "d_ep": 16}, html=True)  # doctest: +SKIP
>>> result.notebook_path, result.html_path  # doctest: +SKIP
(PosixPath('pdcalc-runs/per_card.ipynb'), PosixPath('pdcalc-runs/per_card.html'))
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdcalc.book.page import error_reason, need, read_notebook, write_html
from pdcalc.book.parameters import book_root, chapter_name, resolve_chapter
from pdcalc.book.validators import validate
from pdcalc.core.errors import OneLineError, RerunError

#: Where runs go unless told otherwise (relative to the current directory).
DEFAULT_OUTDIR = Path("pdcalc-runs")
#: Seconds one cell may run before the run is abandoned.
DEFAULT_TIMEOUT_S = 600
_ANSI = re.compile("\x1b\\[[0-9;?]*[A-Za-z]")


class ChapterFailed(OneLineError, RuntimeError):
    """A cell of the re-run chapter raised; the executed copy is kept at :attr:`notebook_path`.

    The command line exits with status 1 for this error (a chapter that fails is not a usage error).
    The message is one line whatever the exception's text (its whitespace is collapsed).
    """

    exit_code = 1

    def __init__(self, chapter: str, notebook_path: Path, cell: str, ename: str, evalue: str):
        self.chapter, self.notebook_path, self.cell, self.ename, self.evalue = (
            chapter, notebook_path, cell, ename, evalue)
        evalue = " ".join(_ANSI.sub("", str(evalue)).split())
        if len(evalue) > 300:
            evalue = evalue[:297] + "..."
        super().__init__(f"{chapter}: {cell} raised {' '.join(str(ename).split())}: {evalue} "
                         f"(executed copy: {notebook_path})")


@dataclass(frozen=True)
class RunResult:
    """What :func:`rerun` wrote."""

    notebook_path: Path          # the executed copy
    html_path: Path | None       # the standalone page, when asked for
    seconds: float               # wall time of the execution (HTML rendering excluded)


# ---------------------------------------------------------------------------------------------
# execution
# ---------------------------------------------------------------------------------------------
def _outdir_allowed(outdir: Path, notebook: Path) -> None:
    roots = []
    root = book_root()
    if root is not None:
        roots.append((root / "book").resolve())
    if notebook.parent.resolve() not in roots and (outdir / notebook.name).resolve() == notebook.resolve():
        roots.append(notebook.parent.resolve())
    for forbidden in roots:
        if outdir == forbidden or forbidden in outdir.parents:
            raise RerunError(f"output folder {outdir} is inside the book's chapters ({forbidden}); "
                             f"re-runs never write there: choose another, e.g. the default {DEFAULT_OUTDIR}/")


def _resolve_outdir(outdir: str | Path) -> Path:
    """``outdir`` made absolute, or :class:`RerunError` for a path that cannot be one."""
    try:
        return Path(outdir).expanduser().resolve()
    except (OSError, RuntimeError, ValueError, TypeError) as exc:  # symlink loop, NUL byte, no home
        raise RerunError(f"output folder {str(outdir)!r}: not a usable path ({error_reason(exc)})") from None


def _prepare_outdir(out: Path, targets: list[Path]) -> None:
    """Create ``out`` if needed and make sure the run can write ``targets`` there, before anything runs.

    Raises
    ------
    RerunError
        ``out`` (or a parent) is a file, cannot be created (read-only or missing file system, no
        permission), cannot be written to, or a target exists and is not a regular file.
    """
    if out.exists() and not out.is_dir():
        kind = "a file" if out.is_file() else "not a folder (a device, socket or pipe)"
        raise RerunError(f"output folder {out} is {kind}: give a folder, existing or to create (-o DIR)")
    if not out.exists():
        parent = next((p for p in out.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise RerunError(f"output folder {out} cannot be created: {parent} is a file, not a folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RerunError(f"output folder {out} cannot be created ({error_reason(exc)}): "
                             f"choose a folder you can write to (-o DIR)") from None
    for target in targets:
        if target.exists() and not target.is_file():
            raise RerunError(f"output folder {out}: {target.name} exists and is not a file; "
                             f"move it away or choose another folder")
    try:  # permissions, read-only mounts and full disks show only when writing
        with tempfile.NamedTemporaryFile(dir=out, prefix=".pdcalc-write-test-"):
            pass
    except OSError as exc:
        raise RerunError(f"output folder {out} is not writable ({error_reason(exc)}): "
                         f"choose a folder you can write to (-o DIR)") from None


def _kernel_manager_class():
    """An AsyncKernelManager whose ``python3`` is this interpreter's ipykernel, its stderr silenced.

    A stray ``python3`` kernelspec elsewhere on JUPYTER_PATH therefore cannot run the chapter with
    another environment's pdcalc; errors reach the notebook through the kernel protocol anyway.
    """
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class CurrentEnvKernelSpecManager(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            if kernel_name == "python3":
                return self.kernel_spec_class(resource_dir=ipykernel.kernelspec.RESOURCES,
                                              **ipykernel.kernelspec.get_kernel_dict())
            return super().get_kernel_spec(kernel_name)

    class CurrentEnvKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            return CurrentEnvKernelSpecManager(data_dir=self.data_dir)

        async def start_kernel(self, **kw):
            kw.setdefault("stderr", subprocess.DEVNULL)
            return await super().start_kernel(**kw)

    return CurrentEnvKernelManager


def _describe_cell(nb, index: int, exec_count) -> str:
    cell = nb.cells[index] if 0 <= index < len(nb.cells) else None
    first = ""
    if cell is not None:
        lines = [ln.strip() for ln in cell.source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        first = lines[0] if lines else ""
        if len(first) > 60:
            first = first[:57] + "..."
    where = f"cell In [{exec_count}]" if exec_count is not None else f"cell {index}"
    return f"{where} ({first})" if first else where


def rerun(chapter: str | Path, params: dict[str, Any] | None = None, outdir: str | Path = DEFAULT_OUTDIR,
          html: bool = False, *, timeout_s: int = DEFAULT_TIMEOUT_S) -> RunResult:
    """Execute a copy of ``chapter`` with ``params`` into ``outdir``; optionally write an HTML page.

    Parameters
    ----------
    chapter : str or Path
        A chapter name (``per_card``, ``kv_memory`` ...) or a notebook path.
    params : dict, optional
        New parameter values (Python values). Validated with :func:`validate` before anything runs
        or is written.
    outdir : str or Path
        Output folder, created if needed; never inside ``book/``. The executed copy is
        ``OUTDIR/<chapter>.ipynb`` (and ``OUTDIR/<chapter>.html``), replaced if present.
    html : bool
        Also write a standalone HTML page (see :func:`pdcalc.book.page.write_html`).
    timeout_s : int
        Seconds a single cell may run.

    Returns
    -------
    RunResult
        The paths written and the execution's wall time in seconds.

    Raises
    ------
    UnknownNameError, ParameterError, RerunError
        Before anything runs; nothing is written.
    ChapterFailed
        A cell raised; the executed copy, with the error, is written for inspection.

    Notes
    -----
    papermill executes the copy with kernel ``python3`` (this interpreter), in the chapter's own
    directory, and records the parameters in the copy's metadata. The chapter file is only read.
    """
    params = dict(params or {})
    path = resolve_chapter(chapter)
    name = chapter_name(path)
    values = validate(path, params)
    out = _resolve_outdir(outdir)
    _outdir_allowed(out, path)
    papermill = need("papermill", "papermill")
    PapermillExecutionError = need("papermill.exceptions", "papermill").PapermillExecutionError
    if html:
        need("nbconvert", "nbconvert")
    nb_path = out / f"{name}.ipynb"
    _prepare_outdir(out, [nb_path] + ([out / f"{name}.html"] if html else []))
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(path), str(nb_path), parameters=values, cwd=str(path.parent), kernel_name="python3",
            progress_bar=False, log_output=False, execution_timeout=timeout_s,
            kernel_manager_class=_kernel_manager_class(),
        )
    except PapermillExecutionError as exc:
        # papermill has since added marker cells to the copy; its cell_index counts without them.
        executed = read_notebook(nb_path)
        executed.cells = [c for c in executed.cells
                          if "papermill-error-cell-tag" not in c.get("metadata", {}).get("tags", [])]
        raise ChapterFailed(name, nb_path, _describe_cell(executed, exc.cell_index, exc.exec_count),
                            exc.ename, exc.evalue) from None
    except Exception as exc:  # kernel died, timeout: not a cell's own exception
        raise ChapterFailed(name, nb_path, "the run", type(exc).__name__, str(exc)) from None
    seconds = time.perf_counter() - t0
    html_path = write_html(nb_path, out / f"{name}.html") if html else None
    return RunResult(notebook_path=nb_path, html_path=html_path, seconds=seconds)
