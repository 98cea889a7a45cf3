"""pdcalc 0.1's module names keep working for one release: every public name of every old module is found
where it lives now, with a deprecation warning naming the new place (pdcalc.legacy)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pdcalc import legacy

OLD = json.loads((Path(__file__).parent / "data" / "legacy_names.json").read_text(encoding="utf-8"))["modules"]
CASES = [(m, n) for m, names in sorted(OLD.items()) for n in names]


@pytest.mark.parametrize("module,name", CASES, ids=[f"{m}.{n}" for m, n in CASES])
def test_every_old_public_name_resolves(module, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mod = importlib.import_module(module)
        assert getattr(mod, name) is not None or name in dir(mod)


def test_an_old_name_warns_and_is_the_new_object():
    from pdcalc.perf.step import step

    with pytest.warns(DeprecationWarning, match="pdcalc.throughput.step is pdcalc.perf.step.step now"):
        from pdcalc.throughput import step as old_step
    assert old_step is step


def test_old_module_imports_and_package_names_forward():
    from pdcalc.model.config import load_config
    from pdcalc.plan.search import plan

    with pytest.warns(DeprecationWarning):
        import pdcalc.memory as memory
        assert memory.card_weights.__module__ == "pdcalc.layout.memory"
    with pytest.warns(DeprecationWarning):
        from pdcalc.model import load_config as old
    assert old is load_config
    with pytest.warns(DeprecationWarning):
        from pdcalc.plan import plan as old_plan
    assert old_plan is plan


def test_private_and_unknown_names_are_not_forwarded():
    with pytest.raises(AttributeError):
        legacy.lookup("pdcalc.throughput", "_split")
    with pytest.raises(AttributeError, match="moved with the package's layers"):
        legacy.lookup("pdcalc.throughput", "no_such_name")


def test_legacy_covers_exactly_the_modules_that_moved():
    """An old module moved when no file of that name is left (or its name is a package now)."""
    root = Path(legacy.__file__).parent.parent
    moved = {m for m in OLD if not (root / (m.replace(".", "/") + ".py")).is_file()
             and not (root / m.replace(".", "/") / "__init__.py").is_file()} | set(legacy.PACKAGES)
    assert moved == set(legacy.MOVED)


def test_new_code_never_uses_the_old_names():
    """The package, its tests and the chapters import from the new places: importing all of them loads no alias."""
    code = ("import sys, pkgutil, importlib, warnings, pdcalc\n"
            "warnings.simplefilter('error', DeprecationWarning)\n"
            "for m in pkgutil.walk_packages(pdcalc.__path__, 'pdcalc.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m in pdcalc.legacy.MOVED and m not in pdcalc.legacy.PACKAGES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
