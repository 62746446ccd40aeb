#!/usr/bin/env python3
"""scripts/fp8_parity.py end to end on a small Llama for a few steps: the
three runs (bf16, fp8 tensorwise, fp8 rowwise) on one data order, the CSV of
both splits with each fp8 run's relative gap computed from its losses, the
summary's table, the PNG (or, without matplotlib, the message saying how to
get it after the tables), the verdict against --max-gap both ways, --seeds
(a set of runs per seed, the verdict on their mean gap) with --reuse
(finished runs taken, not retrained), and clear errors for bad arguments
and a run that fails. Run directly or through ctest
(fp8_parity):

    python3 tests/scripts/test_fp8_parity.py --build build
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "fp8_parity.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import prepare_data  # noqa: E402

BUILD = os.path.join(REPO, "build")


def matplotlib_reachable():
    """This interpreter's matplotlib, or /usr/bin/python3's (scripts/plotting.py)."""
    probe = [sys.executable, "-c", "import matplotlib"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return True
    return os.access("/usr/bin/python3", os.X_OK) and subprocess.run(
        ["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode == 0


class Fp8Parity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gt_fp8_parity_")
        data = os.path.join(cls.dir, "data")
        os.makedirs(data)
        text = b"the quick brown fox jumps over the lazy dog. " * 400
        prepare_data.write_shard(os.path.join(data, "train_000000.bin"), list(text))
        prepare_data.write_shard(os.path.join(data, "val_000000.bin"), list(text[:4000]))
        cls.config = os.path.join(cls.dir, "tiny.yaml")
        with open(cls.config, "w") as f:
            f.write("model: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, "
                    "ffn_hidden: 64, vocab_size: 256, block_size: 32}\n"
                    f"data: {{train: ['{data}/train_*.bin'], val: ['{data}/val_*.bin']}}\n"
                    "train: {seq_len: 32, micro_batch: 4, global_batch: 4, lr: 0.003, "
                    "warmup_steps: 2, eval_every: 4, eval_batches: 1}\n"
                    "runtime: {threads: 1}\n")

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, "--trainer",
                               os.path.join(BUILD, "trainer"), *args],
                              capture_output=True, text=True, timeout=600)

    def test_three_runs_their_curves_gaps_and_verdict(self):
        out = os.path.join(self.dir, "out")
        p = self.run_script("--config", self.config, "--steps", "9", "--eval-batches", "2",
                            "--out", out, "--max-gap", "1.0")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for run in ("bf16", "fp8_tensorwise", "fp8_rowwise"):
            self.assertTrue(os.path.exists(os.path.join(out, run, "metrics.jsonl")), run)
        with open(os.path.join(out, "fp8_tensorwise", "config.yaml")) as f:
            cfg = f.read()
        self.assertIn("fp8: tensorwise", cfg)
        self.assertIn("fp8_min_dim: 0", cfg)
        self.assertIn("eval_batches: 2", cfg)
        with open(os.path.join(out, "curves.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual({r["split"] for r in rows}, {"train", "val"})
        train = [r for r in rows if r["split"] == "train"]
        self.assertEqual([int(r["step"]) for r in train], list(range(9)))
        for r in rows:  # each gap is (fp8 - bf16) / bf16 of its own row
            for run in ("fp8_tensorwise", "fp8_rowwise"):
                want = (float(r[run]) - float(r["bf16"])) / float(r["bf16"])
                self.assertAlmostEqual(float(r["gap_" + run]), want, places=5)
        # fp8 is not bf16: some loss differs.
        self.assertTrue(any(r["fp8_tensorwise"] != r["bf16"] for r in train))
        with open(os.path.join(out, "summary.md")) as f:
            summary = f.read()
        self.assertIn("final validation loss at step 8", summary)
        for run in ("bf16", "fp8_tensorwise", "fp8_rowwise"):
            self.assertIn(f"| {run} |", summary)
        png = os.path.join(out, "parity.png")
        if matplotlib_reachable():
            self.assertTrue(os.path.getsize(png) > 0)
        else:
            self.assertFalse(os.path.exists(png))
        # The same runs at a gap no fp8 run can meet: exit 1, naming the runs.
        p = self.run_script("--config", self.config, "--steps", "9", "--eval-batches", "2",
                            "--out", out, "--max-gap", "0", "--recipe", "rowwise")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("FAIL fp8_rowwise: final val-loss gap", p.stderr)

    def test_seeds_average_the_gap_and_reuse_trains_only_what_is_missing(self):
        out = os.path.join(self.dir, "seeds")
        args = ("--config", self.config, "--steps", "5", "--eval-batches", "1", "--out", out,
                "--recipe", "tensorwise", "--max-gap", "1.0", "--reuse")
        p = self.run_script(*args, "--seeds", "3")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = self.run_script(*args, "--seeds", "3,4")  # seed 3's runs are taken as they are
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("bf16 seed 3: reused", p.stdout)
        self.assertIn("fp8_tensorwise seed 3: reused", p.stdout)
        self.assertNotIn("seed 4: reused", p.stdout)
        for seed in (3, 4):
            for run in ("bf16", "fp8_tensorwise"):
                cfg = os.path.join(out, f"seed_{seed}", run, "config.yaml")
                with open(cfg) as f:
                    self.assertIn(f"seed: {seed}", f.read())
        with open(os.path.join(out, "curves.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual({r["seed"] for r in rows}, {"3", "4"})
        # Different seeds, different runs.
        last = {r["seed"]: float(r["bf16"]) for r in rows if r["split"] == "val"
                and r["step"] == "4"}
        self.assertNotEqual(last["3"], last["4"])
        with open(os.path.join(out, "summary.md")) as f:
            summary = f.read()
        gaps = {r["seed"]: float(r["gap_fp8_tensorwise"]) for r in rows
                if r["split"] == "val" and r["step"] == "4"}
        mean = 100 * (gaps["3"] + gaps["4"]) / 2
        self.assertIn(f"| fp8_tensorwise | {mean:+.2f}% |", summary)
        self.assertIn("mean gap over 2 seeds", summary)
        # The verdict takes the mean: a bound under it fails, naming the mean.
        p = self.run_script(*args, "--seeds", "3,4", "--max-gap", "0")
        self.assertEqual(p.returncode, 1)
        self.assertIn("(mean of 2 seeds) exceeds 0.00%", p.stderr)
        p = self.run_script(*args, "--seeds", "3,3")
        self.assertEqual(p.returncode, 2)
        self.assertIn("a seed is listed twice", p.stderr)
        p = self.run_script(*args, "--seeds", "3", "--set", "train.seed=5")
        self.assertEqual(p.returncode, 2)
        self.assertIn("both set the seed", p.stderr)

    def test_bad_arguments_and_a_failing_run(self):
        p = self.run_script("--config", self.config, "--steps", "0")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--steps must be at least 1", p.stderr)
        p = subprocess.run([sys.executable, SCRIPT, "--trainer", "/nonexistent/trainer"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not an executable", p.stderr)
        p = self.run_script("--config", os.path.join(self.dir, "missing.yaml"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("no such file", p.stderr)
        out = os.path.join(self.dir, "bad")
        p = self.run_script("--config", self.config, "--steps", "2", "--out", out,
                            "--set", "model.n_head=5")
        self.assertEqual(p.returncode, 1)
        self.assertIn("the bf16 run failed", p.stderr)
        self.assertIn(os.path.join(out, "bf16", "run.log"), p.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=BUILD)
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build)
    unittest.main(argv=[sys.argv[0]] + rest)
