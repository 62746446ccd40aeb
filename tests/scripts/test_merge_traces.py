#!/usr/bin/env python3
"""scripts/merge_traces.py on synthetic per-rank traces (what the profiler
writes: pid = rank, a compute tid and one tid per communication axis, async
in-flight spans with ids), plus every input error it must name.
Standard library only; run directly or through ctest (merge_traces)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "merge_traces.py")


def rank_trace(rank, same_ids=False):
    ev = [
        {"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"r{rank}"}},
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": 1, "args": {"name": "compute"}},
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": 10, "args": {"name": "comm dp"}},
    ]
    for k in range(3):
        t = 1000.0 * k + 10 * rank
        ev.append({"name": "matmul_forward", "cat": "compute", "ph": "X", "pid": rank, "tid": 1,
                   "ts": t, "dur": 400.0, "args": {"flops": 1e9}})
        i = k if same_ids else (rank << 32) + k
        ev.append({"name": "all_reduce dp", "cat": "comm_in_flight", "ph": "b", "pid": rank,
                   "tid": 10, "ts": t + 400, "id": i})
        ev.append({"name": "all_reduce dp", "cat": "comm_in_flight", "ph": "e", "pid": rank,
                   "tid": 10, "ts": t + 700, "id": i})
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": {"rank": rank}}


class MergeTraces(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_traces_")

    def write(self, name, doc):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_one_process_per_rank_with_its_streams(self):
        for r in (2, 0, 1):  # written out of order; trace_rank10 sorts after 2
            self.write(f"trace_rank{r}.json", rank_trace(r))
        self.write("trace_rank10.json", rank_trace(10))
        p = self.run_script(self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.dir, "trace.json")) as f:
            merged = json.load(f)
        ev = merged["traceEvents"]
        self.assertEqual(merged["otherData"]["ranks"], [0, 1, 2, 10])
        names = {e["pid"]: e["args"]["name"] for e in ev
                 if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(names, {0: "rank 0", 1: "rank 1", 2: "rank 2", 10: "rank 10"})
        self.assertEqual(sum(1 for e in ev if e.get("name") == "process_name"), 4)
        sort = {e["pid"]: e["args"]["sort_index"] for e in ev if e.get("name") == "process_sort_index"}
        self.assertEqual(sort, {0: 0, 1: 1, 2: 2, 10: 10})
        tracks = {(e["pid"], e["tid"]) for e in ev if e["ph"] != "M"}
        self.assertEqual(tracks, {(r, t) for r in (0, 1, 2, 10) for t in (1, 10)})
        threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
        self.assertEqual(threads[(1, 10)], "comm dp")
        timed = [e for e in ev if e["ph"] != "M"]
        self.assertEqual(len(timed), 4 * 9)
        self.assertEqual([e["ts"] for e in timed], sorted(e["ts"] for e in timed))
        self.assertTrue(all(e["ph"] == "M" for e in ev[:len(ev) - len(timed)]))

    def test_shared_async_ids_are_made_unique(self):
        for r in (0, 1):
            self.write(f"trace_rank{r}.json", rank_trace(r, same_ids=True))
        out = os.path.join(self.dir, "m.json")
        p = self.run_script(os.path.join(self.dir, "trace_rank0.json"),
                            os.path.join(self.dir, "trace_rank1.json"), "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            ev = json.load(f)["traceEvents"]
        ids = {}
        for e in ev:
            if e["ph"] in ("b", "e"):
                ids.setdefault(e["id"], set()).add(e["pid"])
        self.assertEqual(len(ids), 6)
        self.assertTrue(all(len(p) == 1 for p in ids.values()))

    def test_bare_event_array_takes_the_rank_from_the_name(self):
        self.write("trace_rank3.json", rank_trace(3)["traceEvents"])
        p = self.run_script(self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)

    def check_error(self, files, needle):
        for name, doc in files.items():
            self.write(name, doc)
        p = self.run_script(self.dir)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn(needle, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "trace.json")))

    def test_not_json(self):
        self.check_error({"trace_rank0.json": "{not json"}, "trace_rank0.json: not JSON")

    def test_missing_timestamp(self):
        t = rank_trace(0)
        del t["traceEvents"][4]["ts"]
        self.check_error({"trace_rank0.json": t}, 'no numeric "ts"')

    def test_complete_event_without_duration(self):
        t = rank_trace(0)
        del t["traceEvents"][3]["dur"]
        self.check_error({"trace_rank0.json": t}, 'without a "dur"')

    def test_async_event_without_id(self):
        t = rank_trace(0)
        del t["traceEvents"][4]["id"]
        self.check_error({"trace_rank0.json": t}, 'async event without an "id"')

    def test_pid_other_than_the_rank(self):
        t = rank_trace(1)
        t["otherData"]["rank"] = 2
        self.check_error({"trace_rank1.json": t}, "expected only the rank 2")

    def test_two_files_of_one_rank(self):
        self.check_error({"trace_rank0.json": rank_trace(0), "trace_rank00.json": rank_trace(0)},
                         "rank 0 is also in")

    def test_empty_directory(self):
        self.check_error({}, "no trace_rank*.json files")


if __name__ == "__main__":
    unittest.main()
