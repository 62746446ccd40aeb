#!/usr/bin/env python3
"""scripts/plot_metrics.py: a PNG from a synthetic metrics.jsonl (with and
without mfu, with a skipped step), and clear errors for a missing, empty or
malformed file. Without matplotlib in this interpreter the script must say
how to install it and exit 1. Run directly or through ctest (plot_metrics)."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile


def matplotlib_reachable():
    """What the plotting scripts will find: this interpreter's matplotlib, or
    /usr/bin/python3's, which they re-run under (scripts/plotting.py)."""
    if importlib.util.find_spec("matplotlib") is not None:
        return True
    if os.environ.get("GT_PLOT_REEXEC") or not os.access("/usr/bin/python3", os.X_OK):
        return False
    return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode == 0
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "plot_metrics.py")
HAVE_MPL = matplotlib_reachable()


class PlotMetrics(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_plot_")

    def metrics(self, name, recs):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            for r in recs:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        return path

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_png_from_a_run(self):
        recs = []
        for s in range(20):
            r = {"step": s, "loss": 5.0 - 0.1 * s, "tokens_per_s": 1000 + s, "step_ms": 10}
            if s % 5 == 0:
                r["val_loss"] = 5.1 - 0.1 * s
            if s == 7:
                r["loss"], r["skipped"] = None, True
            if s > 0:
                r["mfu"] = 0.3
            recs.append(r)
        path = self.metrics("metrics.jsonl", recs)
        p = self.run_script(path)
        png = os.path.join(self.dir, "metrics.png")
        if not HAVE_MPL:
            self.assertEqual(p.returncode, 1)
            self.assertIn("matplotlib is not installed", p.stderr)
            return
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertIn("MFU", p.stdout)
        # A run folder, as every other command takes: its metrics.jsonl.
        os.remove(png)
        p = self.run_script(self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(png))
        # Without mfu: two panels, and --out is honoured.
        path = self.metrics("nomfu.jsonl", [{k: v for k, v in r.items() if k != "mfu"} for r in recs])
        out = os.path.join(self.dir, "x.png")
        p = self.run_script(path, "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.getsize(out) > 1000)
        self.assertIn("no mfu", p.stdout)

    @unittest.skipIf(importlib.util.find_spec("matplotlib") is not None,
                     "this interpreter has matplotlib")
    def test_without_matplotlib_says_how_to_install_it(self):
        path = self.metrics("m.jsonl", [{"step": 0, "loss": 1.0, "tokens_per_s": 5}])
        p = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True,
                           env=dict(os.environ, GT_PLOT_REEXEC="1"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("matplotlib is not installed", p.stderr)
        self.assertIn("apt-get install python3-matplotlib", p.stderr)

    def test_missing_file(self):
        p = self.run_script(os.path.join(self.dir, "nope.jsonl"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("no such file", p.stderr)

    def test_folder_without_metrics(self):
        p = self.run_script(self.dir)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.strip().count("\n"), 0, p.stderr)
        self.assertIn("no metrics.jsonl in this folder", p.stderr)

    def test_damaged_bytes_are_one_line(self):
        path = os.path.join(self.dir, "metrics.jsonl")
        with open(path, "wb") as f:
            f.write(b'{"step": 0, "loss": 1}\n\xff\xfe\x00garbage\n')
        p = self.run_script(path)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.strip().count("\n"), 0, p.stderr)
        self.assertIn("metrics.jsonl:2: not JSON", p.stderr)
        self.assertNotIn("Traceback", p.stderr)

    @unittest.skipIf(os.geteuid() == 0, "root reads any file")
    def test_unreadable_file(self):
        path = self.metrics("locked.jsonl", [{"step": 0, "loss": 1.0}])
        os.chmod(path, 0)
        p = self.run_script(path)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot read it", p.stderr)

    def test_empty_file(self):
        p = self.run_script(self.metrics("empty.jsonl", []))
        self.assertEqual(p.returncode, 1)
        self.assertIn("empty", p.stderr)

    def test_malformed_line(self):
        p = self.run_script(self.metrics("bad.jsonl", ['{"step": 0, "loss": 1}', "{oops"]))
        self.assertEqual(p.returncode, 1)
        self.assertIn("bad.jsonl:2: not JSON", p.stderr)


if __name__ == "__main__":
    unittest.main()
