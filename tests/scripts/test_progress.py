#!/usr/bin/env python3
"""scripts/progress.py against the shared cases of tests/progress_format.json
(tests/cpu/test_progress.cpp holds the trainer's line to the same ones), its
command line (gpu_check.sh's), and its reporting: nothing for a quick job,
periodic lines into a log, a live line on a terminal.

    python3 tests/scripts/test_progress.py
"""

import io
import json
import os
import subprocess
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import progress  # noqa: E402


class Tty(io.StringIO):
    def isatty(self):
        return True


class ProgressLine(unittest.TestCase):
    def test_shared_cases(self):
        with open(os.path.join(REPO, "tests", "progress_format.json")) as f:
            cases = json.load(f)["cases"]
        self.assertGreaterEqual(len(cases), 5)
        for c in cases:
            self.assertEqual(progress.format_line(c["job"], c["done"], c["total"], c["unit"],
                                                  c["elapsed"], c["fields"]), c["want"])

    def test_command_line(self):
        p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "progress.py"),
                            "gpu_check", "120", "480", "s", "120", "4 stages done"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "gpu_check: 120/480 s (25%) | 4 stages done | "
                                           "1.00 s/s | elapsed 0:02:00 | ETA 0:06:00")
        bad = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "progress.py"),
                              "x", "1"], capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("usage", bad.stderr)

    def test_quiet_then_periodic_into_a_log(self):
        log = io.StringIO()
        p = progress.Progress("job", 10, "items", stream=log, every=0.0, quiet=3600)
        p.update(5)
        p.close(10)
        self.assertEqual(log.getvalue(), "", "a job shorter than `quiet` prints nothing")
        p = progress.Progress("job", 10, "items", stream=log, every=0.0, quiet=0)
        p.update(5)
        p.close(10)
        lines = log.getvalue().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[0].startswith("job: 5/10 items (50%) | "))
        self.assertTrue(lines[1].startswith("job: 10/10 items (100%) | "))
        self.assertTrue(lines[1].endswith("| ETA 0:00:00"))

    def test_live_line_on_a_terminal(self):
        tty = Tty()
        p = progress.Progress("job", 4, "items", stream=tty, quiet=0)
        p.update(1, force=True)
        p.close(4)
        out = tty.getvalue()
        self.assertTrue(out.startswith("\rjob: 1/4 items (25%)"))
        self.assertIn("\rjob: 4/4 items (100%)", out)
        self.assertTrue(out.endswith("\n"))


if __name__ == "__main__":
    unittest.main()
