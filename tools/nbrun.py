"""Execute a notebook with nbclient in the *current* Python environment.

Shared by ``tools/refresh_notebooks.py`` and ``tools/benchmark.py``. The kernel named
``python3`` is resolved to this interpreter's ipykernel (like ``nbval --nbval-current-env``),
so a stray kernelspec elsewhere on JUPYTER_PATH cannot hijack the run. The kernel starts in
the notebook's own directory, as Jupyter Book and nbval do.
"""

from __future__ import annotations

from pathlib import Path

import ipykernel.kernelspec
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent


class CurrentEnvKernelSpecManager(KernelSpecManager):
    """Resolve ``python3`` to the ipykernel of the running interpreter."""

    def get_kernel_spec(self, kernel_name):
        if kernel_name == "python3":
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES,
                **ipykernel.kernelspec.get_kernel_dict(),
            )
        return super().get_kernel_spec(kernel_name)


def execute(path: Path, *, timeout_s: int = 600) -> nbformat.NotebookNode:
    """Execute ``path`` (cwd = its directory) and return the executed notebook; raise on error.

    Nothing is written. ``record_timing=False`` keeps timestamps out of the cell metadata.
    """
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    kernel_name = nb.metadata.get("kernelspec", {}).get("name", "python3")
    km = KernelManager(kernel_name=kernel_name, kernel_spec_manager=CurrentEnvKernelSpecManager())
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout_s,
        record_timing=False,
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return nb


def toc_files(toc: Path = REPO / "_toc.yml") -> list[str]:
    """Return every ``file:`` entry of a Jupyter Book 1 ``_toc.yml`` (root first), without suffix."""
    import yaml

    from pdcalc.book.parameters import toc_entries

    return toc_entries(yaml.safe_load(toc.read_text(encoding="utf-8")))


def toc_notebooks(toc: Path = REPO / "_toc.yml") -> list[Path]:
    """The chapters of the toc that are notebooks (``<file>.ipynb`` exists), in toc order."""
    out = []
    for entry in toc_files(toc):
        nb = REPO / (entry + ".ipynb")
        if nb.exists():
            out.append(nb)
    return out
