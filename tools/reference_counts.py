#!/usr/bin/env python3
"""Exact parameter inventory of a DeepSeek reference ``inference/model.py``.

The script contains no model code. It imports the ``model.py`` the user points it to,
builds that file's own ``ModelArgs`` from a config JSON, instantiates that file's own
``Transformer`` on PyTorch's meta device (no memory is allocated, nothing is computed)
and walks ``named_parameters()``.

Usage::

    python tools/reference_counts.py --model-py /path/to/inference/model.py \
        --config /path/to/inference/config.json [--dtype bf16|fp8] [--expert-dtype fp4|none] \
        [--scale-fmt ue8m0|none] [--scale-dtype fp8|fp32] --out out.json

Needs ``torch`` (a CPU build is enough; 2.13.0 was used for tests/data/reference/).
It is a developer tool: the pdcalc package and its tests never import it.

What is stubbed and what is not
-------------------------------
The reference files import GPU-only modules (``kernel``: TileLang/Triton kernels, and
``fast_hadamard_transform``: a CUDA extension). Their functions are only *called* in
``forward``; ``__init__`` never touches them. They are replaced by stub modules in
``sys.modules`` whose every attribute is a function that raises if called. Both absolute
(``from kernel import ...``) and package-relative (``from .kernel import ...``) imports
resolve to the stubs, because the file is loaded as ``<synthetic package>.model``.
No ``__init__`` logic of any reference class is changed.

Instantiation follows the reference ``__main__``/``generate.py``: default dtype
bfloat16 (``--default-dtype``), no torch.distributed process group (so world_size 1,
rank 0: every rank-local shard is the full tensor).

Counting rules
--------------
* ``total_params``: sum of ``numel()`` over ``model.parameters()`` (shared tensors counted
  once; this includes non-float parameters such as int32 hash-routing tables and, for
  quantised runs, the block-scale tensors).
* For ``torch.float4_e2m1fn_x2`` one element is one byte holding two FP4 values, so
  ``numel`` counts packed pairs: ``nbytes`` is exactly what torch reports (``Tensor.nbytes``
  on the meta tensor) and ``logical_values`` = 2 * numel.
* ``main_params``: parameters not owned by the MTP module(s) (``model.mtp``), i.e. embed,
  all ``layers``, final norm, head and top-level tensors.
* ``mtp_params``: parameters reachable from ``model.mtp`` that are not also part of the
  main model (the embed/head that MTPBlock shares are excluded and listed separately).
  ``null`` when the reference Transformer has no ``mtp`` attribute.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import platform
import re
import sys
import types
from collections import OrderedDict
from pathlib import Path

import torch

DTYPE_NAMES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
FP4_X2 = getattr(torch, "float4_e2m1fn_x2", None)
_PKG = "_reference_model_pkg"


# --------------------------------------------------------------------------------------
# Loading the reference file
# --------------------------------------------------------------------------------------


def _stub_module(name: str) -> types.ModuleType:
    """A module whose every attribute is a function that refuses to run."""
    mod = types.ModuleType(name)
    mod.__doc__ = f"stub for {name!r} (GPU-only dependency of the reference model.py)"

    def __getattr__(attr: str):  # PEP 562
        if attr.startswith("__"):
            raise AttributeError(attr)

        def _unavailable(*_a, **_k):
            raise RuntimeError(f"{name}.{attr} is a stub: reference_counts.py never runs forward()")

        _unavailable.__name__ = attr
        return _unavailable

    mod.__getattr__ = __getattr__
    return mod


def load_reference(model_py: Path) -> types.ModuleType:
    """Import ``model_py`` with stubbed GPU dependencies."""
    pkg = types.ModuleType(_PKG)
    pkg.__path__ = []  # a namespace-like package with no files of its own
    sys.modules[_PKG] = pkg
    for dep in ("kernel", "fast_hadamard_transform"):
        stub = _stub_module(dep)
        sys.modules.setdefault(dep, stub)  # absolute import in the upstream files
        sys.modules[f"{_PKG}.{dep}"] = stub  # relative import in vendored copies
        setattr(pkg, dep, stub)
    spec = importlib.util.spec_from_file_location(f"{_PKG}.model", model_py)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def build_args(mod, config: dict, cli: argparse.Namespace):
    """ModelArgs from the config plus the CLI's dtype choices. Returns (args, notes)."""
    fields = {f.name for f in dataclasses.fields(mod.ModelArgs)}
    cfg = dict(config)
    notes = {"config_keys_not_in_ModelArgs": sorted(k for k in cfg if k not in fields)}
    kw = {k: v for k, v in cfg.items() if k in fields}
    overrides = {}
    # dtype knobs: the CLI decides; a knob the ModelArgs of this file lacks is an error
    # only if the user asks for a non-default value of it.
    wanted = {
        "dtype": cli.dtype,
        "expert_dtype": None if cli.expert_dtype == "none" else cli.expert_dtype,
    }
    if cli.scale_fmt is not None:
        wanted["scale_fmt"] = None if cli.scale_fmt == "none" else cli.scale_fmt
    if cli.scale_dtype is not None:
        wanted["scale_dtype"] = cli.scale_dtype
    for key, val in wanted.items():
        if key in fields:
            if kw.get(key, "<unset>") != val:
                overrides[key] = {"config": kw.get(key, "<unset: ModelArgs default>"), "used": val}
            kw[key] = val
        elif val is not None:
            raise SystemExit(f"{key}={val!r} requested but this model.py's ModelArgs has no field {key!r}")
    notes["dtype_overrides_vs_config"] = overrides
    if "compress_ratios" in kw and isinstance(kw["compress_ratios"], list):
        kw["compress_ratios"] = tuple(kw["compress_ratios"])
    args = mod.ModelArgs(**kw)
    return args, notes


def instantiate(mod, args, default_dtype: torch.dtype):
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise SystemExit("torch.distributed is initialised: world_size would not be 1")
    prev = torch.get_default_dtype()
    torch.set_default_dtype(default_dtype)
    try:
        with torch.device("meta"):
            model = mod.Transformer(args)
    finally:
        torch.set_default_dtype(prev)
    ws = getattr(mod, "world_size", 1)
    if ws != 1 or getattr(mod, "rank", 0) != 0:
        raise SystemExit(f"unexpected world_size={ws} rank={getattr(mod, 'rank', None)}")
    return model


# --------------------------------------------------------------------------------------
# Collapsing
# --------------------------------------------------------------------------------------

_LAYER_RE = re.compile(r"(^|\.)layers\.(\d+)\.")
_EXPERT_RE = re.compile(r"(^|\.)experts\.(\d+)\.")


def collapse_name(name: str):
    layer = expert = None
    m = _LAYER_RE.search(name)
    if m:
        layer = int(m.group(2))
        name = name[: m.start(2)] + "{layer}" + name[m.end(2):]
    m = _EXPERT_RE.search(name)
    if m:
        expert = int(m.group(2))
        name = name[: m.start(2)] + "{expert}" + name[m.end(2):]
    return name, layer, expert


def compact(ids) -> str | None:
    """Sorted ints as a short string: runs of >= 3 with a constant step become a-b (step 1)
    or a-b/s (step s); everything else is listed. E.g. [0,1,2,4,6,8,43] -> '0-2,4-8/2,43'."""
    ids = sorted(set(ids))
    if not ids:
        return None
    out, i = [], 0
    while i < len(ids):
        j = i
        if i + 2 < len(ids):
            step = ids[i + 1] - ids[i]
            j = i + 1
            while j + 1 < len(ids) and ids[j + 1] - ids[j] == step:
                j += 1
            if j - i + 1 < 3:
                j = i
        if j > i:
            step = ids[i + 1] - ids[i]
            out.append(f"{ids[i]}-{ids[j]}" + ("" if step == 1 else f"/{step}"))
            i = j + 1
        else:
            out.append(str(ids[i]))
            i += 1
    return ",".join(out)


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def tensor_info(p: torch.Tensor) -> dict:
    numel = p.numel()
    nbytes = p.nbytes  # on meta tensors: numel * element_size, no storage is read
    info = {
        "shape": list(p.shape),
        "dtype": dtype_name(p.dtype),
        "numel": numel,
        "element_size": p.element_size(),
        "nbytes": nbytes,
    }
    if FP4_X2 is not None and p.dtype == FP4_X2:
        info["values_per_element"] = 2
        info["logical_values"] = 2 * numel
    return info


def is_scale(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == "scale"


def summarise(named):
    """Totals over a list of (name, tensor)."""
    tot = {"params": 0, "nbytes": 0, "logical_values": 0,
           "weights_nbytes": 0, "scales_nbytes": 0, "scales_params": 0}
    by_dtype = OrderedDict()
    for name, p in named:
        n, b = p.numel(), p.nbytes
        lv = 2 * n if (FP4_X2 is not None and p.dtype == FP4_X2) else n
        tot["params"] += n
        tot["nbytes"] += b
        tot["logical_values"] += lv
        if is_scale(name):
            tot["scales_nbytes"] += b
            tot["scales_params"] += n
        else:
            tot["weights_nbytes"] += b
        d = by_dtype.setdefault(dtype_name(p.dtype), {"tensors": 0, "params": 0, "nbytes": 0})
        d["tensors"] += 1
        d["params"] += n
        d["nbytes"] += b
    tot["logical_values_excluding_scales"] = tot["logical_values"] - tot["scales_params"]
    tot["by_dtype"] = by_dtype
    return tot


def collapse(named):
    groups = OrderedDict()
    for name, p in named:
        pattern, layer, expert = collapse_name(name)
        info = tensor_info(p)
        key = (pattern, tuple(info["shape"]), info["dtype"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"name": pattern, **info, "count": 0, "_layers": set(), "_experts": set()}
        g["count"] += 1
        if layer is not None:
            g["_layers"].add(layer)
        if expert is not None:
            g["_experts"].add(expert)
    out = []
    for g in groups.values():
        layers, experts = g.pop("_layers"), g.pop("_experts")
        if layers:
            g["layers"] = compact(layers)
            g["n_layers"] = len(layers)
        if experts:
            g["experts"] = compact(experts)
            g["n_experts"] = len(experts)
        g["total_numel"] = g["numel"] * g["count"]
        g["total_nbytes"] = g["nbytes"] * g["count"]
        out.append(g)
    return out


# --------------------------------------------------------------------------------------
# Model-specific facts read off the instantiated modules (never from our own formulas)
# --------------------------------------------------------------------------------------


def layer_facts(model, args, prefix="layers"):
    rows = []
    layers = getattr(model, prefix, None)
    if layers is None:
        return rows
    main_ids = set()
    if prefix != "layers":  # MTP blocks hold the main model's embed/head: count only their own
        main_ids = {id(p) for n, p in model.named_parameters() if not n.startswith(prefix + ".")}
    for i, blk in enumerate(layers):
        own = [(n, p) for n, p in blk.named_parameters() if id(p) not in main_ids]
        row = {"layer": i if prefix == "layers" else f"{prefix}.{i}",
               "params": sum(p.numel() for _, p in own),
               "nbytes": sum(p.nbytes for _, p in own)}
        attn = getattr(blk, "attn", None)
        if attn is not None and hasattr(attn, "compress_ratio"):
            row["compress_ratio"] = int(attn.compress_ratio)
            row["has_indexer"] = getattr(attn, "indexer", None) is not None
        ffn = getattr(blk, "ffn", None)
        gate = getattr(ffn, "gate", None)
        if gate is not None:
            row["ffn"] = "moe"
            if hasattr(gate, "hash"):
                row["routing"] = "hash" if gate.hash else "score"
        elif ffn is not None:
            row["ffn"] = type(ffn).__name__.lower()
        rows.append(row)
    return rows


def layer_kinds(model, per_layer):
    """One representative block per distinct kind (compress ratio, indexer, ffn, routing), with
    its own parameter list (names relative to the block, experts collapsed)."""
    kinds = OrderedDict()
    for row in per_layer:
        key = tuple(row.get(k) for k in ("compress_ratio", "has_indexer", "ffn", "routing"))
        is_mtp = isinstance(row["layer"], str)
        key = key + (is_mtp,)
        kinds.setdefault(key, []).append(row["layer"])
    out = []
    for key, members in kinds.items():
        first = members[0]
        blk = model.mtp[int(first.split(".")[1])] if isinstance(first, str) else model.layers[first]
        main_ids = set()
        if isinstance(first, str):  # MTP block: drop the embed/head it shares with the main model
            main_ids = {id(p) for n, p in model.named_parameters() if not n.startswith("mtp.")}
        named = [(n, p) for n, p in blk.named_parameters() if id(p) not in main_ids]
        entry = OrderedDict(
            compress_ratio=key[0], has_indexer=key[1], ffn=key[2], routing=key[3],
            layers=members if is_mtp_list(members) else compact(members),
            n_layers=len(members),
            params_per_layer=sum(p.numel() for _, p in named),
            nbytes_per_layer=sum(p.nbytes for _, p in named),
            tensors=[{k: v for k, v in g.items() if k not in ("layers", "n_layers")} for g in collapse(named)],
        )
        out.append(entry)
    return out


def is_mtp_list(members) -> bool:
    return any(isinstance(m, str) for m in members)


def activated_estimate(model, args, main_named):
    """Parameters touched per token by the main model: everything except the routed experts
    that are not selected (n_routed - n_activated per MoE layer). Embedding and head are
    included in full, as DeepSeek's README_WEIGHTS.md counts them."""
    n_routed = getattr(args, "n_routed_experts", None)
    n_act = getattr(args, "n_activated_experts", None)
    if not n_routed or not n_act:
        return None
    total = sum(p.numel() for _, p in main_named)
    logical = sum((2 * p.numel() if (FP4_X2 is not None and p.dtype == FP4_X2) else p.numel()) for _, p in main_named)
    inactive = inactive_logical = 0
    for blk in model.layers:
        experts = getattr(getattr(blk, "ffn", None), "experts", None)
        if experts is None:
            continue
        per = [sum(p.numel() for p in e.parameters()) for e in experts if e is not None]
        per_l = [sum((2 * p.numel() if (FP4_X2 is not None and p.dtype == FP4_X2) else p.numel()) for p in e.parameters())
                 for e in experts if e is not None]
        assert len(set(per)) == 1 and len(per) == n_routed
        inactive += per[0] * (n_routed - n_act)
        inactive_logical += per_l[0] * (n_routed - n_act)
    return {
        "definition": "main_params minus (n_routed_experts - n_activated_experts) routed experts per MoE "
                      "layer; embedding, head, gates, shared experts, norms and all other tensors counted in full",
        "params": total - inactive,
        "logical_values": logical - inactive_logical,
    }


# --stored-as targets besides DTYPE_NAMES: an e4m3 weight (1 byte per element) plus one 1-byte
# (e8m0) scale per 128 x 128 block of the 2-D weight, the layout of this file's own FP8 Linear.
FP8_BLOCK = "fp8_e4m3_block128_e8m0"


def parse_stored_as(specs):
    rules = []
    for spec in specs:
        parts = spec.split("=", 2)
        if len(parts) < 2 or parts[1] not in (*DTYPE_NAMES, FP8_BLOCK):
            raise SystemExit(f"--stored-as {spec!r}: want REGEX=DTYPE[=WHY] with DTYPE in "
                             f"{sorted(DTYPE_NAMES) + [FP8_BLOCK]}")
        rules.append({"regex": parts[0], "dtype": parts[1], "why": parts[2] if len(parts) > 2 else None})
    return rules


def checkpoint_bytes(named, rules):
    """Bytes with the --stored-as rules applied; everything else as instantiated."""
    compiled = [(re.compile(r["regex"]), DTYPE_NAMES.get(r["dtype"], r["dtype"]), r) for r in rules]
    out = {"weights_nbytes": 0, "scales_nbytes": 0, "nbytes": 0,
           "changed": OrderedDict((r["regex"], {"tensors": 0, "nbytes_as_instantiated": 0, "nbytes_stored": 0})
                                  for r in rules)}
    for name, p in named:
        b = p.nbytes
        for rx, dt, r in compiled:
            if rx.search(name):
                if FP4_X2 is not None and p.dtype == FP4_X2:
                    raise SystemExit(f"--stored-as {r['regex']!r} matches packed fp4 tensor {name}")
                c = out["changed"][r["regex"]]
                c["tensors"] += 1
                c["nbytes_as_instantiated"] += b
                if dt == FP8_BLOCK:
                    if p.dim() != 2:
                        raise SystemExit(f"--stored-as {FP8_BLOCK} needs a 2-D weight, got {name} {list(p.shape)}")
                    b = p.numel()
                    extra = -(-p.shape[0] // 128) * -(-p.shape[1] // 128)
                    c["added_scale_nbytes"] = c.get("added_scale_nbytes", 0) + extra
                    out["scales_nbytes"] += extra
                    out["nbytes"] += extra
                else:
                    b = p.numel() * torch.empty((), dtype=dt).element_size()
                c["nbytes_stored"] += b
                break
        out["nbytes"] += b
        out["scales_nbytes" if is_scale(name) else "weights_nbytes"] += b
    return out


# --------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-py", required=True, type=Path)
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16",
                    help="ModelArgs.dtype (Linear weight dtype); default bf16")
    ap.add_argument("--expert-dtype", choices=["fp4", "none"], default="none",
                    help="ModelArgs.expert_dtype where the file has it; default none (experts follow --dtype)")
    ap.add_argument("--scale-fmt", choices=["ue8m0", "none"], default=None,
                    help="ModelArgs.scale_fmt where the file has it; default: as in the config / ModelArgs")
    ap.add_argument("--scale-dtype", choices=["fp8", "fp32"], default=None,
                    help="ModelArgs.scale_dtype where the file has it; default: as in the config / ModelArgs")
    ap.add_argument("--default-dtype", choices=sorted(DTYPE_NAMES), default="bf16",
                    help="torch default dtype while instantiating (the references' __main__ and generate.py use bf16)")
    ap.add_argument("--stored-as", action="append", default=[], metavar="REGEX=DTYPE[=WHY]",
                    help="for checkpoint_bytes only: parameters whose name matches REGEX (re.search) are stored in "
                         "the checkpoint as DTYPE (bf16|fp16|fp32) rather than as instantiated; repeatable. "
                         "WHY is recorded in the JSON. The exact as-instantiated figures are always reported too")
    ap.add_argument("--label", default=None, help="free text stored in the JSON")
    ap.add_argument("--source", action="append", default=[], metavar="KEY=VALUE",
                    help="provenance note stored verbatim (repeatable), e.g. repo=..., commit=...")
    ap.add_argument("--out", required=True, type=Path)
    cli = ap.parse_args(argv)

    model_bytes = cli.model_py.read_bytes()
    config = json.loads(cli.config.read_text())
    mod = load_reference(cli.model_py)
    args, notes = build_args(mod, config, cli)
    model = instantiate(mod, args, DTYPE_NAMES[cli.default_dtype])

    all_named = list(model.named_parameters())  # remove_duplicate=True: shared tensors once
    mtp = getattr(model, "mtp", None)
    if mtp is not None:
        main_named = [(n, p) for n, p in all_named if not n.startswith("mtp.")]
        main_ids = {id(p) for _, p in main_named}
        mtp_full = list(mtp.named_parameters())
        mtp_own = [("mtp." + n, p) for n, p in mtp_full if id(p) not in main_ids]
        mtp_shared = sorted({"mtp." + n for n, p in mtp_full if id(p) in main_ids})
        assert {id(p) for _, p in mtp_own}.isdisjoint(main_ids)
        assert len(main_named) + len(mtp_own) == len(all_named)
    else:
        main_named, mtp_own, mtp_shared = all_named, None, None

    total = summarise(all_named)
    main_s = summarise(main_named)
    mtp_s = summarise(mtp_own) if mtp_own is not None else None
    assert total["params"] == main_s["params"] + (mtp_s["params"] if mtp_s else 0)

    top_level = [n for n, _ in all_named if not n.startswith(("layers.", "mtp."))]

    result = OrderedDict()
    result["label"] = cli.label
    result["provenance"] = OrderedDict(
        model_py=str(cli.model_py),
        model_py_sha256=hashlib.sha256(model_bytes).hexdigest(),
        model_py_git_blob_sha1=hashlib.sha1(b"blob %d\0" % len(model_bytes) + model_bytes).hexdigest(),
        model_py_bytes=len(model_bytes),
        config=str(cli.config),
        config_sha256=hashlib.sha256(cli.config.read_bytes()).hexdigest(),
        sources=dict(s.split("=", 1) for s in cli.source),
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        device="meta",
        world_size=1,
        default_dtype=dtype_name(DTYPE_NAMES[cli.default_dtype]),
        stubbed_modules=["kernel", "fast_hadamard_transform"],
        model_args={k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(args).items()},
        **notes,
    )
    result["counting_rules"] = {
        "total_params": "sum of numel over model.parameters(); tensors shared between modules counted once; "
                        "includes non-float parameters (e.g. int32 tid2eid) and block-scale tensors when quantised",
        "main_params": "parameters not under model.mtp",
        "mtp_params": "parameters under model.mtp that are not shared with the main model (null: no MTP module)",
        "nbytes": "Tensor.nbytes as torch reports it on the meta tensor (numel * element_size)",
        "float4_e2m1fn_x2": "one element = one byte holding two FP4 values: numel counts packed pairs, "
                            "logical_values = 2 * numel",
        "scales": "parameters whose last name component is 'scale' (block-scale tensors of quantised Linear)",
        "names": "module attribute names in this model.py (not checkpoint key names); "
                 "layers.N -> layers.{layer}, experts.N -> experts.{expert}",
    }
    result["total_params"] = total["params"]
    result["main_params"] = main_s["params"]
    result["mtp_params"] = mtp_s["params"] if mtp_s else None
    if mtp is None:
        result["mtp_note"] = "this model.py's Transformer has no MTP module"
    result["totals"] = OrderedDict(total=total, main=main_s, mtp=mtp_s)
    rules = parse_stored_as(cli.stored_as)
    if rules:
        result["checkpoint_bytes"] = OrderedDict(
            note="as-instantiated bytes are in totals.*; here tensors matching a rule are re-priced at the "
                 "dtype the rule gives (the reference model.py up-casts them when loading), all others as instantiated",
            rules=rules,
            total=checkpoint_bytes(all_named, rules),
            main=checkpoint_bytes(main_named, rules),
            mtp=checkpoint_bytes(mtp_own, rules) if mtp_own is not None else None,
        )
    result["activated_estimate"] = activated_estimate(model, args, main_named)
    result["mtp_shared_with_main"] = mtp_shared
    result["top_level_tensors"] = top_level
    per_layer = layer_facts(model, args) + (layer_facts(model, args, "mtp") if mtp is not None else [])
    result["per_layer"] = per_layer
    result["layer_kinds"] = layer_kinds(model, per_layer)
    result["n_tensors"] = len(all_named)
    result["tensors"] = collapse(all_named)

    cli.out.parent.mkdir(parents=True, exist_ok=True)
    cli.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{cli.out}: total {total['params']:,}  main {main_s['params']:,}  "
          f"mtp {mtp_s['params'] if mtp_s else None}  tensors {len(all_named)}  patterns {len(result['tensors'])}")


if __name__ == "__main__":
    main()
