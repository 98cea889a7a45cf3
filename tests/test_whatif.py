"""Live parameters in the page (pdcalc.book.whatif): the stored planner grid is what `pdcalc plan` prints, and a
what-if table offers exactly its grid."""

from __future__ import annotations

import contextlib
import io
import json

import pandas as pd
import pytest

from pdcalc.book import whatif


def _plan_json(setting: dict) -> dict:
    from pdcalc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(whatif.plan_argv(setting)) == 0
    return json.loads(out.getvalue())


def test_the_stored_grid_covers_every_setting_offered():
    grid = whatif.plan_grid()
    keys = list(whatif.PLAN_GRID)
    expected = 1
    for values in whatif.PLAN_GRID.values():
        expected *= len(values)
    assert len(grid) == expected and not grid.duplicated(keys).any()
    for k, values in whatif.PLAN_GRID.items():
        assert set(grid[k]) == set(values)
    assert list(grid.columns) == keys + list(whatif.PLAN_FIELDS)


@pytest.mark.parametrize("i", [0, 57, 131, 215])
def test_a_stored_setting_is_what_the_command_line_prints(i):
    """Rows spread over the grid (every card, small and large clusters, an out-of-reach TTFT among them), re-run
    through `pdcalc plan --json` now: the page shows what the command prints (tools/whatif_grid.py rewrites the
    grid when the planner changes)."""
    grid = whatif.plan_grid()
    row = grid.iloc[i]
    setting = {k: (str(row[k]) if k == "card" else int(row[k])) for k in whatif.PLAN_GRID}
    assert whatif.plan_fields(_plan_json(setting)) == {f: row[f] for f in whatif.PLAN_FIELDS}


def test_the_grid_has_settings_of_every_kind():
    grid = whatif.plan_grid()
    assert grid["TTFT target"].str.contains("out of reach").any()
    assert (grid["whole cluster: run"] != "nothing meets the targets").any()
    assert (grid["the load on the fewest cards: run"] == "nothing meets the targets").any()


def test_a_whatif_table_refuses_a_start_its_grid_does_not_hold():
    grid = pd.DataFrame({"ep": [16, 32], "weights per card": ["1 GiB", "2 GiB"]})
    whatif.whatif_table(grid, {"ep": "EP"}, ["weights per card"], initial={"ep": 32}, title="t")
    with pytest.raises(ValueError, match="no row with ep = 64"):
        whatif.whatif_table(grid, {"ep": "EP"}, ["weights per card"], initial={"ep": 64}, title="t")
    with pytest.raises(ValueError, match="no column 'tp'"):
        whatif.whatif_table(grid, {"tp": "TP"}, ["weights per card"], initial={}, title="t")


def test_the_planner_whatif_opens_on_the_nearest_setting_and_checks_another_prompt():
    chart, start = whatif.plan_whatif(card="ascend-910b2", cards=60, prompt=20000, output=8192, concurrency=900,
                                      title="t")
    assert start == {"card": "ascend-910b2", "cards": 64, "prompt": 24576, "output": 8192, "concurrency": 960}
    check = chart.to_dict()["usermeta"]["pdcalc"]
    assert check["set"]["prompt"] != start["prompt"] and check["cli"][0] == "plan"
