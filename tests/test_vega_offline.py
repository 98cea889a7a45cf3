"""book/_ext/vega_offline.py: the contract with Altair's HTML loader.

Altair's HTML output loads each library only when ``VEGA_DEBUG["<lib>_version"]`` differs from
the version it asks for. The extension presets exactly those keys and values; if an Altair
upgrade changes the loader, these tests fail before the charts silently go back to a CDN.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))

import vega_offline  # noqa: E402

alt = pytest.importorskip("altair")
pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def altair_html() -> str:
    chart = alt.Chart(pd.DataFrame({"a": ["x"], "b": [1]})).mark_bar().encode(x="a", y="b")
    return chart._repr_mimebundle_()["text/html"]


def test_preset_matches_what_altair_asks_for(altair_html):
    versions = vega_offline.altair_versions()
    assert set(versions) == {"vega_version", "vegalite_version", "vegaembed_version"}
    asked = dict(re.findall(r'maybeLoadScript\("([a-z-]+)", "([^"]+)"\)', altair_html))
    assert asked, "Altair's HTML no longer loads libraries through maybeLoadScript"
    assert {f"{lib.replace('-', '')}_version": v for lib, v in asked.items()} == versions
    # The loader skips a library when VEGA_DEBUG already carries its version, and keeps a preset.
    assert "VEGA_DEBUG[key] == version" in altair_html
    assert 'var VEGA_DEBUG = (typeof VEGA_DEBUG == "undefined") ? {} : VEGA_DEBUG;' in altair_html
    assert "displayChart(vegaEmbed)" in altair_html


def test_bundle_publishes_globals_and_is_scoped():
    bundle, versions = vega_offline.make_bundle()
    assert versions == vega_offline.altair_versions()
    for name in ("window.vegaEmbed", "window.vega", "window.vegaLite"):
        assert f"{name}=" in bundle.replace(" = ", "=")
    # Wrapped in a function: its minified top-level names cannot clash with other page scripts.
    body = bundle.split("*/\n", 1)[1]
    assert body.startswith("(function () {\n") and body.rstrip().endswith("}).call(window);")
    assert "https://cdn.jsdelivr.net" not in bundle


@pytest.mark.parametrize(
    ("wanted", "available", "picked"),
    [
        ("6.4.1", ["5.20", "6.1", "6.4"], "6.4"),
        ("6.5.0", ["5.20", "6.1", "6.4"], "6.4"),
        ("v5.20.1", ["5.8", "5.20", "6.4"], "5.20"),
    ],
)
def test_pick_vl_version(wanted, available, picked):
    assert vega_offline.pick_vl_version(wanted, available) == picked


def test_pick_vl_version_refuses_another_major():
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="none matches"):
        vega_offline.pick_vl_version("7.0.0", ["5.20", "6.4"])
