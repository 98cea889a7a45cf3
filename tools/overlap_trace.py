#!/usr/bin/env python3
"""What DeepSeek's published training trace shows of its computation-communication overlap.

``deepseek-ai/profile-data`` publishes PyTorch-profiler traces of DeepSeek's own runs. Its inference traces
(``prefill.json``, ``decode.json``) are the ones a step model would want; this script reads the one that is
small enough to be kept with a repository snapshot, ``train.json`` (3,132,978 bytes, git blob
``7a8f40f9626fdcabccfe12787b2148b1e4b8e282``, unchanged since the repository's first commit and present at
``449602428a1b023acb8a505d4f34fef536535db6``): one rank (GPU 0 of 64) of a DualPipe forward and backward chunk
pair, EP64, TP1, 4K sequences, as the repository's README states.

It prints one line, which ``pdcalc/data/costs.toml`` records as the quote of the derived point
``deepseek-profile-train-trace-1`` (``tests/test_costs.py`` runs this script and compares, where the trace is
at hand: set ``PDCALC_PROFILE_DATA`` to a folder holding ``train.json``).

The computation, over the trace's kernel events (``cat == "kernel"``, all on device 0):

* the card's SMs: ``deviceProperties[0].numSms``;
* the SMs the grouped GEMMs run on: the thread blocks of every ``dpsk::grouped_gemm`` ``GemmKernel`` launch
  (the product of its ``grid``); the kernels are persistent, one block per SM (the trace's own
  ``blocks per SM`` is the grid over the SMs), and every launch has the same count;
* the SMs the communication kernels take: likewise, the blocks of every DeepEP ``dispatch`` and ``combine``
  launch (``dpsk::ep::internode::dispatch<`` and ``...::combine<``);
* the communication kernels' time: the union of the intervals ``[ts, ts + dur)`` of every kernel whose name
  holds ``dpsk::ep::`` (dispatch, combine and their notify and layout kernels), in microseconds;
* of that time, what runs alongside computation: its intersection with the union of every other kernel's
  intervals. The rest is communication no kernel of the rank overlaps (exposed).

Usage::

    python tools/overlap_trace.py /path/to/train.json

Only the standard library is used. It is a developer tool: the pdcalc package never imports it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from math import prod
from pathlib import Path

#: git blob id of the train.json this script was written for (``git hash-object train.json``).
TRAIN_BLOB = "7a8f40f9626fdcabccfe12787b2148b1e4b8e282"


def blob_id(data: bytes) -> str:
    """The git blob id of ``data``: sha1 of ``b"blob <size>\\0" + data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _union(intervals):
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _length(union) -> int:
    return sum(b - a for a, b in union)


def _overlap(u, v) -> int:
    """Length of the intersection of two unions of disjoint sorted intervals."""
    i = j = total = 0
    while i < len(u) and j < len(v):
        lo, hi = max(u[i][0], v[j][0]), min(u[i][1], v[j][1])
        total += max(0, hi - lo)
        if u[i][1] < v[j][1]:
            i += 1
        else:
            j += 1
    return total


def measure(trace: dict) -> dict:
    """The figures of the module docstring from a loaded trace."""
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    devices = {e["args"]["device"] for e in kernels}
    if devices != {0}:
        raise ValueError(f"expected the kernels of one device (0), got {sorted(devices)}")
    sms = int(trace["deviceProperties"][0]["numSms"])
    gemm = {prod(e["args"]["grid"]) for e in kernels if "dpsk::grouped_gemm" in e["name"] and "GemmKernel" in e["name"]}
    comm_blocks = {prod(e["args"]["grid"]) for e in kernels
                   if "dpsk::ep::internode::dispatch<" in e["name"] or "dpsk::ep::internode::combine<" in e["name"]}
    if len(gemm) != 1 or len(comm_blocks) != 1:
        raise ValueError(f"expected one block count each, got GEMM {sorted(gemm)}, dispatch/combine "
                         f"{sorted(comm_blocks)}")
    comm = _union((int(e["ts"]), int(e["ts"] + e["dur"])) for e in kernels if "dpsk::ep::" in e["name"])
    other = _union((int(e["ts"]), int(e["ts"] + e["dur"])) for e in kernels if "dpsk::ep::" not in e["name"])
    info = trace.get("distributedInfo", {})
    return {"rank": info.get("rank"), "world_size": info.get("world_size"),
            "device": trace["deviceProperties"][0]["name"], "sms": sms, "gemm_blocks": gemm.pop(),
            "comm_blocks": comm_blocks.pop(), "comm_us": _length(comm), "comm_alongside_us": _overlap(comm, other)}


def line(m: dict) -> str:
    """The one line the costs file quotes."""
    return (f"train.json (rank {m['rank']} of {m['world_size']}, {m['device']}, {m['sms']} SMs): grouped GEMM "
            f"kernels {m['gemm_blocks']} thread blocks, DeepEP dispatch and combine kernels {m['comm_blocks']}; "
            f"DeepEP kernels {m['comm_us']} us, {m['comm_alongside_us']} us of them alongside other kernels")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.split("Usage::")[1].split("Only")[0].strip(), file=sys.stderr)
        return 2
    data = Path(argv[0]).read_bytes()
    got = blob_id(data)
    if got != TRAIN_BLOB:
        print(f"{argv[0]}: git blob {got}, not the published train.json ({TRAIN_BLOB})", file=sys.stderr)
        return 1
    print(line(measure(json.loads(data))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
