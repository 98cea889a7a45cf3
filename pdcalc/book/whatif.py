"""Live parameters in a page: a grid of pdcalc results over a few inputs, shown through Vega-Lite parameters.

A page with live parameters carries, inside its chart, every result of a small grid that pdcalc computed when the
chapter ran (one row per combination of the inputs a reader may change, each figure already rounded as the book
rounds it). Vega-Lite parameters bound to drop-downs pick the row: the table and the chart follow at once, in the
browser, with no server, no Python and no request leaving the site. The formulas stay in Python; the page only
chooses among their results, so what it shows for a setting is what ``pdcalc`` prints for the same inputs.

Each what-if chart says in its ``usermeta.pdcalc`` how to check it: which control to change, to what, which
figure then to read, and the ``pdcalc`` command whose JSON gives that figure (``make check-site`` changes the
control in Chromium, waits for the redraw and compares the two).

A setting whose deployment does not fit is a row like any other: its figures say "does not fit, short by ...".
"""

from __future__ import annotations

import pandas as pd

from pdcalc.core.units import GiB

#: Vega-Lite table rows are this many pixels apart.
ROW_PX = 22
#: Width of the value column, pixels.
VALUE_PX = 330


def _param(col: str, label: str, options: list, value):
    import altair as alt

    return alt.param(name=f"p_{col}", value=value, bind=alt.binding_select(options=options, name=f"{label} "))


def whatif_table(grid: pd.DataFrame, controls: dict[str, str], fields: list[str], *, initial: dict, title: str,
                 check: dict | None = None, chart=None):
    """A table of ``fields`` for the row of ``grid`` the controls pick.

    ``grid``: one row per combination of the ``controls`` columns (each a preset name or a number), the ``fields``
    columns as the text a reader reads; ``controls``: column -> the control's label; ``initial``: column -> the
    value the page starts from (the chapter's parameters); ``check``: what ``make check-site`` changes and compares
    (:func:`check_spec`); ``chart``: an optional Altair chart over the same long grid that the controls filter too
    (its data carries the control columns), drawn under the table."""
    import altair as alt

    missing = [c for c in [*controls, *fields] if c not in grid.columns]
    if missing:
        raise ValueError(f"the grid has no column {missing[0]!r}")
    for col, v in initial.items():
        if v not in set(grid[col]):
            raise ValueError(f"the grid has no row with {col} = {v!r} (its values: {sorted(set(grid[col]))})")
    params = {c: _param(c, label, sorted(set(grid[c].tolist())), initial[c]) for c, label in controls.items()}
    rows = []
    for _, r in grid.iterrows():
        for i, f in enumerate(fields):
            rows.append({**{c: r[c] for c in controls}, "order": i, "quantity": f, "value": str(r[f]),
                         "check": f"{f}={r[f]}"})
    long = pd.DataFrame(rows)
    pick = None
    for c, p in params.items():
        term = alt.datum[c] == p
        pick = term if pick is None else pick & term
    base = alt.Chart(long).transform_filter(pick)
    y = alt.Y("quantity:N", sort=alt.SortField("order"), title=None,
              axis=alt.Axis(labelLimit=320, labelFontSize=13, domain=False, ticks=False, labelPadding=8))
    table = base.mark_text(align="left", baseline="middle", fontSize=13, dx=4).encode(
        x=alt.value(0), y=y, text="value:N", description="check:N").properties(width=VALUE_PX, height=alt.Step(ROW_PX), title=title)
    out = table if chart is None else alt.vconcat(table, chart.transform_filter(_without(pick, chart, params)))
    meta = {"embedOptions": {"renderer": "svg", "actions": False}}
    if check:
        meta["pdcalc"] = check
    return out.add_params(*params.values()).properties(usermeta=meta).configure_view(stroke=None)


def _without(pick, chart, params):
    """The filter for ``chart``: every control whose column the chart's data has."""
    import altair as alt

    cols = set(chart.data.columns) if isinstance(chart.data, pd.DataFrame) else set()
    out = None
    for c, p in params.items():
        if c in cols:
            term = alt.datum[c] == p
            out = term if out is None else out & term
    return out if out is not None else alt.datum[next(iter(params))] == alt.datum[next(iter(params))]


def check_spec(*, set_values: dict, field: str, cli: list[str], json_path: list, divide_by: int = 1,
               decimals: int | None = None) -> dict:
    """What ``make check-site`` does with a what-if chart: set each control (column -> value), read ``field``,
    and compare it with ``pdcalc CLI... --json`` at ``json_path``, divided by ``divide_by`` (a unit in bytes, say),
    rounded to ``decimals`` (None: compared as text)."""
    return {"set": set_values, "field": field, "cli": cli, "json_path": json_path, "divide_by": int(divide_by),
            "decimals": decimals}


def gib(x: float) -> str:
    """GiB to two decimals, as the engines print memory."""
    return f"{x / GiB:,.2f} GiB"


#: The Ascend cards a what-if page offers besides the chapter's own.
ASCEND_CARDS = ("ascend-910b2", "ascend-910b3", "ascend-910b4", "ascend-910b4-32g", "ascend-910c-die")


def weights_chart(bars: pd.DataFrame):
    """Weights per card against the EP group for the chosen card (columns ``card``, ``EP group (cards)``,
    ``weights (GiB)``, ``usable (GiB)``), the usable memory as a dashed line: for :func:`whatif_table`'s ``chart``."""
    import altair as alt

    x = alt.X("EP group (cards):O", title="EP group (cards)")
    base = alt.Chart(bars)
    w = base.mark_bar(color="#4c78a8").encode(x=x, y=alt.Y("weights (GiB):Q", title="GiB per card"),
                                              tooltip=["EP group (cards)", "weights (GiB)"])
    u = base.mark_line(strokeDash=[4, 4], color="gray").encode(x=x, y="usable (GiB):Q")
    return (w + u).properties(width=VALUE_PX, height=200,
                              title="weights per card (bars) against the usable memory (dashed)")


def capacity_chart(points: pd.DataFrame):
    """Sequences a D card holds against their context for the chosen card and EP group (columns ``card``, ``ep``,
    ``context (tokens)``, ``sequences``): for :func:`whatif_table`'s ``chart``."""
    import altair as alt

    x = alt.X("context (tokens):Q", title="context (tokens)", scale=alt.Scale(type="log", nice=False))
    return alt.Chart(points).mark_line(point=True).encode(
        x=x, y=alt.Y("sequences:Q", title="sequences per D card"),
        tooltip=["context (tokens)", "sequences"]).properties(
        width=VALUE_PX, height=200, title="sequences that fit on a D card against their context")


# ---------------------------------------------------------------------------------------------
# the planner's grid (What to run, plan): `pdcalc plan --json` for every setting, stored by tools/whatif_grid.py
# ---------------------------------------------------------------------------------------------
from pathlib import Path  # noqa: E402

#: The settings the planner's what-if offers (DeepSeek-V4-Flash, the command line's defaults otherwise, one MTP
#: draft token as the vllm-ascend tutorial runs it).
PLAN_GRID = {"card": ("ascend-910b2", "ascend-910b4", "ascend-910c-die"), "cards": (16, 32, 64, 128),
             "prompt": (1024, 4096, 24576), "output": (1024, 8192), "concurrency": (64, 256, 960)}
PLAN_MODEL = "deepseek-v4-flash"
PLAN_DRAFT_TOKENS = 1
PLAN_GRID_PATH = Path(__file__).resolve().parent.parent / "data" / "whatif_plans.csv"
#: The figures each setting shows, in order.
PLAN_FIELDS = ("TTFT target", "whole cluster: run", "whole cluster: output tokens/s", "whole cluster: TPOT, TTFT",
               "the load on the fewest cards: run")


def plan_argv(setting: dict) -> list[str]:
    """The ``pdcalc plan`` command line of one setting of :data:`PLAN_GRID`."""
    return ["plan", "--model", PLAN_MODEL, "--card", setting["card"], "--cards", str(setting["cards"]),
            "--prompt", str(setting["prompt"]), "--output", str(setting["output"]),
            "--concurrency", str(setting["concurrency"]), "--draft-tokens", str(PLAN_DRAFT_TOKENS), "--json"]


def plan_fields(d: dict) -> dict:
    """The figures of :data:`PLAN_FIELDS` from ``pdcalc plan --json``: the answers to both objectives, or, where
    no layout serves one prompt within the TTFT target, the answers under the target the planner then uses."""
    from pdcalc.plan.objectives import seconds_text

    goals, far = d["objectives"], d.get("ttft_out_of_reach")
    target = d["targets"]["TTFT"]["seconds"]
    ttft = "none" if target is None else seconds_text(target)
    if goals["fixed cluster"] is None and far:
        goals = {k: v if v is not None else far["objectives"][k] for k, v in goals.items()}
        ttft = (f"{seconds_text(far['answered_under_ttft_s'])} ({seconds_text(far['ttft_target_s'])} is out of reach: "
                f"one prompt takes {seconds_text(far['fastest_ttft_s'])} at best)")
    whole, load = goals["fixed cluster"], goals["fixed load"]

    def run(a):
        return "nothing meets the targets" if a is None else f"{a['layout']} ({a['cards']:,} cards)"

    return {"TTFT target": ttft, "whole cluster: run": run(whole),
            "whole cluster: output tokens/s": "none" if whole is None else f"{whole['output_tokens_per_s']:,.0f}",
            "whole cluster: TPOT, TTFT": "none" if whole is None else
            f"{1e3 * whole['tpot_s']:,.1f} ms, {seconds_text(whole['ttft_s'])}",
            "the load on the fewest cards: run": run(load)}


def plan_grid() -> pd.DataFrame:
    """The stored grid (:data:`PLAN_GRID_PATH`)."""
    return pd.read_csv(PLAN_GRID_PATH, keep_default_na=False)


def _nearest(options, value):
    """The grid's option closest to ``value`` (the first option when ``value`` is not a number on the grid)."""
    options = list(options)
    if value in options:
        return value
    try:
        return min(options, key=lambda o: abs(float(o) - float(value)))
    except (TypeError, ValueError):
        return options[0]


def plan_whatif(*, card, cards, prompt, output, concurrency, title: str):
    """The planner's what-if (:data:`PLAN_GRID`) starting from the grid's setting nearest the chapter's, and the
    check ``make check-site`` runs: another prompt length whose whole-cluster answer meets the targets, against
    ``pdcalc plan --json``. Returns the chart and the setting it starts from."""
    grid = plan_grid()
    start = {"card": _nearest(PLAN_GRID["card"], card), "cards": _nearest(PLAN_GRID["cards"], cards),
             "prompt": _nearest(PLAN_GRID["prompt"], prompt), "output": _nearest(PLAN_GRID["output"], output),
             "concurrency": _nearest(PLAN_GRID["concurrency"], concurrency)}
    same = grid
    for k in ("card", "cards", "output", "concurrency"):
        same = same[same[k] == start[k]]
    met = same[(same["prompt"] != start["prompt"]) & (same["whole cluster: output tokens/s"] != "none")
               & ~same["TTFT target"].str.contains("out of reach")]
    check = None
    if len(met):
        alt_setting = {**start, "prompt": int(met.iloc[0]["prompt"])}
        check = check_spec(set_values={"prompt": alt_setting["prompt"]}, field="whole cluster: output tokens/s",
                           cli=plan_argv(alt_setting), json_path=["objectives", "fixed cluster", "output_tokens_per_s"],
                           decimals=0)
    controls = {"card": "card", "cards": "cards", "prompt": "prompt (tokens)", "output": "output (tokens)",
                "concurrency": "sequences in flight"}
    chart = whatif_table(grid, controls, list(PLAN_FIELDS), initial=start, title=title, check=check)
    return chart, start
