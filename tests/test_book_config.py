"""The book's navigation and reference: table-of-contents parts, the glossary, the search language, the
build stamp and the hardware page (``_toc.yml``, ``_config.yml``, ``book/_ext``, ``book/glossary.md``,
``book/hardware.ipynb``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BOOK = REPO / "book"
EXT = BOOK / "_ext"

#: The parts of the table of contents, in order, with the chapters each holds.
PARTS = {
    "The DeepSeek-V4-Flash article": ["book/architecture", "book/per_card", "book/kv_memory", "book/transfer",
                                      "book/pd_split"],
    "The DeepSeek-V3 article": ["book/v3_article", "book/v3_throughput"],
    "Your own deployment": ["book/plan"],
    "Reality check": ["book/validation"],
    "Reference": ["book/glossary", "book/hardware"],
}
#: The first part, once its chapter exists.
FINDINGS = ("Findings and what to run", "book/what_to_run")

#: Terms the glossary must define (matched case-insensitively, as Sphinx's {term} role does).
GLOSSARY_TERMS = [
    "PD disaggregation", "prefill", "decode", "P instance", "D instance", "P/D instance", "TTFT", "TPOT",
    "EP", "TP", "DP", "MoE", "routed expert", "shared expert", "MLA", "MTP", "KV cache", "paged cache", "block",
    "HCCS", "RoCE", "HBM", "GB", "GiB", "W8A8", "FP8", "BF16", "mHC", "CSA", "HCA", "indexer", "Mooncake",
    "vLLM", "vllm-ascend", "gpu-memory-utilization", "max-num-seqs", "max-model-len", "all-to-all",
    "dispatch", "combine", "all-reduce", "roofline", "MFU", "MBU", "EPLB",
]


@pytest.fixture(scope="module")
def toc() -> dict:
    return yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))


def _load_ext(name: str):
    spec = importlib.util.spec_from_file_location(f"book_ext_{name}", EXT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _exists(entry: str) -> bool:
    return any((REPO / (entry + ext)).exists() for ext in (".md", ".ipynb"))


# -- table of contents ---------------------------------------------------------------------------
def test_toc_has_the_parts_in_order(toc):
    assert toc["format"] == "jb-book" and toc["root"] == "book/intro"
    assert "chapters" not in toc, "every chapter belongs to a part"
    expected = dict(PARTS)
    if _exists(FINDINGS[1]):
        expected = {FINDINGS[0]: [FINDINGS[1]], **expected}
    got = {part["caption"]: [c["file"] for c in part["chapters"]] for part in toc["parts"]}
    assert list(got) == list(expected), "parts and their order"
    for caption, files in expected.items():
        listed = iter(got[caption])  # these chapters, in this order (a part may gain more)
        assert all(f in listed for f in files), f"{caption}: expected {files} in order, got {got[caption]}"


def test_every_book_page_is_in_a_part(toc):
    from pdcalc.book.parameters import toc_entries

    in_parts = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    sources = sorted(str(p.relative_to(REPO).with_suffix("")) for p in BOOK.glob("*") if p.suffix in (".md", ".ipynb"))
    assert sorted(in_parts + [toc["root"]]) == sources
    # the walk the packaging test and `pdcalc rerun` use sees the parts' chapters too
    assert toc_entries(toc) == [toc["root"], *in_parts]


def test_rerun_lists_the_notebooks_of_every_part():
    from pdcalc.book.parameters import chapters

    names = set(chapters())
    assert {Path(f).name for files in PARTS.values() for f in files if (REPO / (f + ".ipynb")).exists()} <= names


# -- glossary ------------------------------------------------------------------------------------
def glossary_terms(text: str) -> list[str]:
    """The terms of every ```{glossary} block of a MyST page (unindented lines inside the block)."""
    terms = []
    for block in re.findall(r"^```\{glossary\}[^\n]*\n(.*?)^```", text, re.S | re.M):
        terms += [line.strip() for line in block.splitlines()
                  if line.strip() and not line[0].isspace() and not line.startswith(":")]
    return terms


def test_glossary_defines_the_terms_once():
    terms = glossary_terms((BOOK / "glossary.md").read_text(encoding="utf-8"))
    lower = [t.lower() for t in terms]
    assert len(lower) == len(set(lower)), sorted(t for t in lower if lower.count(t) > 1)
    missing = [t for t in GLOSSARY_TERMS if t.lower() not in lower]
    assert not missing, f"glossary lacks {missing}"


def test_glossary_holds_no_computed_numbers():
    # a Markdown page cannot glue: figures belong to the chapters (definitions like 10^9 are in math)
    text = (BOOK / "glossary.md").read_text(encoding="utf-8")
    prose = re.sub(r"\$[^$]*\$|`[^`]*`", "", text)
    assert not re.findall(r"(?<![\w.-])\d+(?:\.\d+)?(?![\w.])", prose)


def _markdown_sources() -> dict[str, str]:
    out = {}
    for path in sorted(BOOK.glob("*.md")):
        out[path.name] = path.read_text(encoding="utf-8")
    for path in sorted(BOOK.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        out[path.name] = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return out


def test_every_term_reference_in_the_book_is_defined():
    terms = {t.lower() for t in glossary_terms((BOOK / "glossary.md").read_text(encoding="utf-8"))}
    bad = []
    for name, text in _markdown_sources().items():
        for ref in re.findall(r"\{term\}`([^`]+)`", text):
            target = re.search(r"<([^<>]+)>\s*$", ref)
            target = (target.group(1) if target else ref).strip()
            if target.lower() not in terms:
                bad.append(f"{name}: {{term}}`{ref}`")
    assert not bad, "undefined glossary terms: " + ", ".join(bad)


# -- search --------------------------------------------------------------------------------------
def test_chinese_search_is_on_and_its_extension_declared(config):
    sphinx = config["sphinx"]
    assert sphinx["config"]["html_search_language"] == "zh"
    assert (REPO / sphinx["local_extensions"]["search_zh"] / "search_zh.py").exists()


def test_search_language_indexes_chinese_as_pairs_and_english_as_words():
    ext = _load_ext("search_zh")
    assert ext.split_words("昇腾910B 显存占用 专家") == ["昇腾", "910B", "显存", "存占", "占用", "专家"]
    assert ext.split_words("每卡权重全景图") == ["每卡", "卡权", "权重", "重全", "全景", "景图"]
    assert ext.split_words("卡 KV缓存 TTFT_ms") == ["卡", "KV", "缓存", "TTFT_ms"]
    lang = ext.SearchZhPairs({})
    assert lang.lang == "zh" and "splitQuery" in lang.js_splitter_code
    words = lang.split("Decoding experts on the card 显存 卡")
    kept = [lang.stem(w) for w in words if lang.word_filter(lang.stem(w))]
    assert kept == ["decod", "expert", "card", "显存", "卡"]


def test_search_extension_replaces_the_zh_language_without_jieba():
    ext = _load_ext("search_zh")
    registered = []

    class App:
        def add_search_language(self, cls):
            registered.append(cls)

    ext.setup(App())
    assert registered == [ext.SearchZhPairs]
    source = (EXT / "search_zh.py").read_text(encoding="utf-8")
    assert "import jieba" not in source  # no dictionary to install, nothing silently missing without it


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js not installed")
def test_query_splitter_matches_the_index_splitter():
    ext = _load_ext("search_zh")
    samples = ["昇腾", "显存", "专家并行", "最终每卡权重全景图", "KV缓存 TTFT", "P和D的EP差异", "卡", "decode-only 𠀀𠀁"]
    script = ext.JS_SPLITTER + "\nconsole.log(JSON.stringify(%s.map(splitQuery)));" % json.dumps(samples)
    done = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [ext.split_words(s) for s in samples]


# -- build stamp ---------------------------------------------------------------------------------
def test_build_stamp_is_declared_and_links_nowhere_by_default(config):
    sphinx = config["sphinx"]
    assert (REPO / sphinx["local_extensions"]["build_stamp"] / "build_stamp.py").exists()
    assert "repository_url" not in sphinx["config"], "no public repository is known: leave repository_url unset"


def test_build_stamp_in_and_outside_a_git_checkout(tmp_path):
    ext = _load_ext("build_stamp")
    outside = ext.read_stamp(tmp_path)
    assert outside.commit is None
    assert "not from a git checkout" in ext.stamp_html(outside) and "<a " not in ext.stamp_html(outside)
    here = ext.read_stamp(REPO)
    assert here.commit and re.fullmatch(r"[0-9a-f]{40}", here.commit) and here.commit.startswith(here.short)
    plain = ext.stamp_html(here, "", "book/glossary.md")
    assert here.short in plain and "<a " not in plain and here.date_iso in plain
    linked = ext.stamp_html(here, "https://example.org/repo/", "book/glossary.md")
    assert f'href="https://example.org/repo/tree/{here.commit}"' in linked
    assert f'href="https://example.org/repo/blob/{here.commit}/book/glossary.md"' in linked


def test_build_date_follows_source_date_epoch():
    ext = _load_ext("build_stamp")
    assert ext.build_date({"SOURCE_DATE_EPOCH": "0"}).isoformat() == "1970-01-01T00:00:00+00:00"
    assert ext.read_stamp(REPO, ext.build_date({"SOURCE_DATE_EPOCH": "86400"})).date == "1970-01-02 00:00 UTC"


# -- hardware page -------------------------------------------------------------------------------
def test_hardware_page_hides_its_code_and_is_committed_with_outputs():
    nb = json.loads((BOOK / "hardware.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all("remove-input" in c["metadata"].get("tags", []) for c in code)
    assert all(c["outputs"] for c in code[1:]), "execute it with tools/refresh_notebooks.py and commit the outputs"
    tables = "".join("".join(o.get("data", {}).get("text/html", "")) for c in code for o in c["outputs"])
    from pdcalc.hardware.cards import card_names

    for name in card_names():
        assert f">{name}<" in tables, f"card preset {name} missing from the hardware page"
