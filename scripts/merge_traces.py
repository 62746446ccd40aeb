#!/usr/bin/env python3
"""Merge per-rank Chrome traces into one timeline: one process per rank.

    scripts/merge_traces.py runs/x                      # runs/x/trace_rank*.json -> runs/x/trace.json
    scripts/merge_traces.py runs/x/trace_rank0.json runs/x/trace_rank1.json --out all.json

Each input is what the trainer's profiler writes per rank (Chrome trace event
format, JSON object with "traceEvents", or a bare event array): pid = rank,
one tid per stream (compute, one per communication axis), timestamps in
microseconds from a barrier every rank passed together, so the ranks line up.
The merged file (open it in Perfetto or chrome://tracing) has one process per
rank named "rank r" and sorted by rank, with each rank's threads (streams)
as its tracks.

Validated, each an error naming the file (and event): unreadable or non-JSON
files, events that are not objects or lack "ph"/"pid"/"ts"/"name", complete
events ("X") without a non-negative "dur", async events ("b"/"e") without an
"id", a file whose events name more than one pid or a pid other than its
rank, and two files of the same rank. A file's rank comes from
otherData.rank, else from its name (trace_rank<r>.json), else its events' pid.
Async ids that two ranks share are made unique (rank in the high 32 bits).
Standard library only.
"""

import argparse
import glob
import json
import os
import re
import sys

ASYNC = ("b", "e", "n")


class TraceError(Exception):
    pass


def load(path):
    """(rank, events) of one per-rank trace file."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})")
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON ({e.msg} at line {e.lineno})")
    other = {}
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        other = doc.get("otherData") or {}
        if not isinstance(events, list):
            raise TraceError(f'{path}: expected "traceEvents" to be a list of events')
    elif isinstance(doc, list):
        events = doc
    else:
        raise TraceError(f"{path}: expected a JSON object with traceEvents or an event array")
    for i, ev in enumerate(events):
        where = f"{path}: event {i}"
        if not isinstance(ev, dict):
            raise TraceError(f"{where}: not an object")
        ph = ev.get("ph")
        if not isinstance(ph, str) or not ph:
            raise TraceError(f'{where}: no "ph" (phase)')
        if not isinstance(ev.get("pid"), int):
            raise TraceError(f'{where} ({ev.get("name", "?")}): no integer "pid"')
        if ph != "M":
            if not isinstance(ev.get("name"), str):
                raise TraceError(f'{where}: no "name"')
            if not isinstance(ev.get("ts"), (int, float)):
                raise TraceError(f'{where} ({ev["name"]}): no numeric "ts"')
        if ph == "X" and not (isinstance(ev.get("dur"), (int, float)) and ev["dur"] >= 0):
            raise TraceError(f'{where} ({ev["name"]}): complete event without a "dur" >= 0')
        if ph in ASYNC and "id" not in ev and "id2" not in ev:
            raise TraceError(f'{where} ({ev["name"]}): async event without an "id"')
    pids = sorted({ev["pid"] for ev in events})
    rank = other.get("rank") if isinstance(other.get("rank"), int) else None
    if rank is None:
        m = re.search(r"rank(\d+)", os.path.basename(path))
        rank = int(m.group(1)) if m else None
    if rank is None:
        if len(pids) != 1:
            raise TraceError(f"{path}: cannot tell its rank (no otherData.rank, no rank in the "
                             f"name, pids {pids})")
        rank = pids[0]
    if len(pids) > 1 or (pids and pids[0] != rank):
        raise TraceError(f"{path}: events carry pid(s) {pids}, expected only the rank {rank}")
    return rank, events


def merge(paths):
    by_rank = {}
    for path in paths:
        rank, events = load(path)
        if rank in by_rank:
            raise TraceError(f"{path}: rank {rank} is also in {by_rank[rank][0]}")
        by_rank[rank] = (path, events)
    # Async ids are global in the format: rewrite those that two ranks share.
    owners = {}
    for rank, (_, events) in by_rank.items():
        for ev in events:
            if ev["ph"] in ASYNC and "id" in ev:
                owners.setdefault(ev["id"], set()).add(rank)
    shared = {i for i, r in owners.items() if len(r) > 1}
    meta, timed = [], []
    for rank in sorted(by_rank):
        _, events = by_rank[rank]
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": f"rank {rank}"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"sort_index": rank}})
        for ev in events:
            if ev["ph"] == "M":
                if ev.get("name") in ("process_name", "process_sort_index"):
                    continue  # replaced by the two above
                meta.append(ev)
                continue
            if ev["ph"] in ASYNC and ev.get("id") in shared:
                ev = dict(ev)
                ev["id"] = (rank << 32) + ev["id"] if isinstance(ev["id"], int) \
                    else f"rank{rank}:{ev['id']}"
            timed.append(ev)
    timed.sort(key=lambda e: (e["ts"], e["pid"]))
    return {"traceEvents": meta + timed, "displayTimeUnit": "ms",
            "otherData": {"ranks": sorted(by_rank),
                          "merged_from": [os.path.basename(by_rank[r][0]) for r in sorted(by_rank)]}}


def inputs(args):
    if len(args) == 1 and os.path.isdir(args[0]):
        found = glob.glob(os.path.join(args[0], "trace_rank*.json"))
        found.sort(key=lambda p: int(re.search(r"rank(\d+)", os.path.basename(p)).group(1))
                   if re.search(r"rank(\d+)", os.path.basename(p)) else 0)
        if not found:
            raise TraceError(f"{args[0]}: no trace_rank*.json files")
        return found, os.path.join(args[0], "trace.json")
    return args, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="a run directory, or trace_rank*.json files")
    ap.add_argument("--out", help="merged trace (default: <dir>/trace.json for a directory)")
    args = ap.parse_args()
    try:
        paths, default_out = inputs(args.inputs)
        out = args.out or default_out
        if not out:
            raise TraceError("--out is needed when the inputs are files")
        merged = merge(paths)
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        json.dump(merged, f)
    n = sum(1 for e in merged["traceEvents"] if e["ph"] != "M")
    print(f"wrote {out}: {len(merged['otherData']['ranks'])} ranks, {n} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
