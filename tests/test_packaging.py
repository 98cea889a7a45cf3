"""Packaging and book-layout consistency.

pyproject.toml is the single source of dependencies and requirements-lock.txt pins their exact
versions; environment.yml, the Makefile and the book's table of contents must agree with them and
with the files on disk.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
LOCK = "requirements-lock.txt"


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def environment() -> dict:
    return yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def toc() -> dict:
    return yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))


def _conda_deps(environment: dict) -> tuple[list[str], list[str]]:
    """Split environment.yml dependencies into conda specs and pip lines."""
    conda, pip = [], []
    for dep in environment["dependencies"]:
        if isinstance(dep, dict):
            assert set(dep) == {"pip"}, f"unexpected dependency mapping {dep}"
            pip.extend(dep["pip"])
        else:
            conda.append(str(dep))
    return conda, pip


def _extras_of_editable_install(line: str) -> set[str]:
    m = re.fullmatch(r"-e\s+['\"]?\.\[([A-Za-z0-9_,\-\s]+)\]['\"]?", line.strip())
    assert m, f"expected '-e .[extra,...]', got {line!r}"
    return {e.strip() for e in m.group(1).split(",")}


def test_environment_names_only_python_and_pip(environment):
    conda, pip = _conda_deps(environment)
    names = sorted(re.split(r"[=<>!\s]", c, maxsplit=1)[0] for c in conda)
    assert names == ["pip", "python"], f"environment.yml must name only python and pip, got {conda}"
    assert pip == [f"-c {LOCK}", pip[-1]], f"environment.yml must install the project under {LOCK}, got {pip}"


def test_environment_installs_exactly_the_pyproject_extras(environment, pyproject):
    _, pip = _conda_deps(environment)
    extras = set(pyproject["project"]["optional-dependencies"])
    assert _extras_of_editable_install(pip[-1]) == extras


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / LOCK).read_text(encoding="utf-8").splitlines():
        if line and not line.startswith((" ", "#")):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{LOCK}: {line!r} is not an exact pin"
            pins[req.name.lower().replace("_", "-")] = spec.version
    return pins


def test_lock_pins_every_dependency_within_its_range(pyproject):
    pins = _lock()
    reqs = list(pyproject["project"]["dependencies"])
    for extra in pyproject["project"]["optional-dependencies"].values():
        reqs.extend(extra)
    for r in map(Requirement, reqs):
        name = r.name.lower().replace("_", "-")
        assert name in pins, f"{r.name} is in pyproject.toml but not pinned in {LOCK}: run make lock"
        assert Version(pins[name]) in r.specifier, f"{LOCK} pins {name}=={pins[name]} outside {r}"


def test_makefile_and_ci_install_under_the_lock():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(rf"^LOCK := {re.escape(LOCK)}$", makefile, re.M)
    assert re.search(r"pip install[^\n]*-c \$\(LOCK\)[^\n]*-e '\.\[", makefile)
    assert re.search(r"^\$\(STAMP\): pyproject.toml \$\(LOCK\)$", makefile, re.M), "a new lock must reinstall"
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_makefile_installs_exactly_the_pyproject_extras(pyproject):
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    lines = re.findall(r"pip install[^\n]*-e\s+'?\.\[[^\]]*\]'?", makefile)
    assert lines, "Makefile does not install the project with `pip install -e '.[...]'`"
    extras = set(pyproject["project"]["optional-dependencies"])
    for line in lines:
        assert _extras_of_editable_install(line[line.index("-e"):]) == extras, line


def test_python_versions_agree(environment, pyproject):
    conda, _ = _conda_deps(environment)
    (pin,) = [c for c in conda if c.startswith("python")]
    env_version = Version(re.sub(r"^python\s*=*\s*", "", pin).rstrip(".*"))
    requires = SpecifierSet(pyproject["project"]["requires-python"])
    assert env_version in requires, f"environment.yml {pin} outside requires-python {requires}"
    lower = [Version(s.version) for s in requires if s.operator in (">=", "~=", "==")]
    assert lower and min(lower).release[:2] == env_version.release[:2], (
        f"environment.yml pins {pin}; requires-python {requires} has another minimum"
    )


def test_jupyter_book_is_pinned_to_v1(pyproject):
    # jupyter-book 2 ignores _config.yml/_toc.yml and exits 0 having built nothing.
    reqs = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["book"]]
    (jb,) = [r for r in reqs if r.name == "jupyter-book"]
    assert Version("1.0.4") in jb.specifier and Version("2.0.0") not in jb.specifier


def test_core_dependencies_are_light(pyproject):
    names = {Requirement(r).name for r in pyproject["project"]["dependencies"]}
    assert {"numpy", "pandas"} <= names
    assert not names & {"jupyter-book", "altair", "pytest", "nbval"}, "book/test tools belong in extras"


def _toc_entries(toc: dict) -> list[str]:
    from pdcalc.book.parameters import toc_entries

    return toc_entries(toc)


def test_toc_lists_only_existing_files(toc):
    entries = _toc_entries(toc)
    assert len(entries) == len(set(entries)), f"duplicate toc entries: {entries}"
    for entry in entries:
        candidates = [REPO / (entry + ext) for ext in (".md", ".ipynb")]
        existing = [c for c in candidates if c.exists()]
        assert len(existing) == 1, f"_toc.yml entry {entry!r}: expected one of {candidates}, found {existing}"


def test_every_book_source_is_in_the_toc(toc):
    listed = set(_toc_entries(toc))
    sources = sorted(p for p in (REPO / "book").glob("*") if p.suffix in (".md", ".ipynb"))
    assert sources, "no book/*.md or book/*.ipynb found"
    missing = [str(p.relative_to(REPO)) for p in sources if str(p.relative_to(REPO).with_suffix("")) not in listed]
    assert not missing, f"book sources missing from _toc.yml: {missing}"


def test_book_config_is_strict_and_offline():
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    assert config["execute"]["execute_notebooks"] == "force"  # `cache` serves stale outputs
    assert config["sphinx"]["config"]["nb_execution_raise_on_error"] is True
    assert "repository" not in config
    excluded = set(config["exclude_patterns"])
    assert {".venv", "_build", "tests", "tools", ".ci", "pdcalc", "node_modules"} <= excluded
    assert "vega_offline" in config["sphinx"]["local_extensions"]
    ext_dir = REPO / config["sphinx"]["local_extensions"]["vega_offline"]
    assert (ext_dir / "vega_offline.py").exists()


def test_every_data_file_ships_with_the_package(pyproject):
    """A file under pdcalc/data that no package-data pattern names is missing from an installed pdcalc."""
    from fnmatch import fnmatch

    patterns = pyproject["tool"]["setuptools"]["package-data"]["pdcalc"]
    data = REPO / "pdcalc" / "data"
    files = [p.relative_to(REPO / "pdcalc").as_posix() for p in data.rglob("*") if p.is_file()]
    assert files
    loose = [f for f in files if not any(fnmatch(f, pat) or fnmatch(f, pat.replace("**/", "")) for pat in patterns)]
    assert loose == []
