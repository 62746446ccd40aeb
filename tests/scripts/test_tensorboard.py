#!/usr/bin/env python3
"""log.tensorboard: the trainer's event files read back with TensorBoard's own
reader (tensorboard's EventAccumulator, from PyPI: WITH_PYPI=1
scripts/install_deps.sh, which the test command runs; fails, not skips,
without it):

  * every number of every metrics.jsonl record is a scalar at its step, tags
    the keys (nested ones as comm_bytes/<axis>), values equal to float32;
  * a run killed past its checkpoint and resumed from it: the reader shows
    each step once, the resumed run's values (the session-start marker
    drops the orphaned steps);
  * log.tensorboard off writes no event file.

    python3 tests/scripts/test_tensorboard.py --build build
"""

import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import prepare_data  # noqa: E402

BUILD = None


def scalars_of(log_dir):
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={"scalars": 0},
                                             purge_orphaned_data=True)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expected_of(metrics_path):
    """metrics.jsonl as {tag: [(step, float32 value)]}."""
    want = {}

    def add(prefix, obj, step):
        for k, v in obj.items():
            tag = f"{prefix}/{k}" if prefix else k
            if isinstance(v, dict):
                add(tag, v, step)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and tag != "step":
                f32 = struct.unpack("<f", struct.pack("<f", v))[0]
                want.setdefault(tag, []).append((step, f32))
    with open(metrics_path) as f:
        for line in f:
            rec = json.loads(line)
            add("", rec, rec["step"])
    return want


class TensorBoard(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_tensorboard_")
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        toks = [(i * 7 + i // 13) % 256 for i in range(20000)]
        prepare_data.write_shard(os.path.join(data, "train_000000.bin"), toks[:16000], vocab=256)
        prepare_data.write_shard(os.path.join(data, "val_000000.bin"), toks[16000:], vocab=256)
        self.cfg = os.path.join(self.dir, "cfg.yaml")
        with open(self.cfg, "w") as f:
            f.write(f"""model:
  n_layer: 2
  n_head: 2
  n_embd: 32
  vocab_size: 256
  block_size: 32
data:
  train: ["{data}/train_*.bin"]
  val: ["{data}/val_*.bin"]
train:
  seq_len: 32
  micro_batch: 4
  global_batch: 4
  steps: 8
  eval_every: 4
  eval_batches: 1
runtime:
  device: cpu
checkpoint:
  every: 4
""")

    def train(self, log_dir, *overrides):
        p = subprocess.run([os.path.join(BUILD, "trainer"), "--config", self.cfg,
                            f"log.dir={log_dir}", *overrides],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])

    def check_equal(self, log_dir):
        got, want = scalars_of(log_dir), expected_of(os.path.join(log_dir, "metrics.jsonl"))
        self.assertEqual(sorted(got), sorted(want))
        self.assertIn("comm_bytes/world", got)
        self.assertIn("val_loss", got)
        for tag in want:
            self.assertEqual(got[tag], want[tag], tag)

    def test_every_metric_is_a_scalar(self):
        run = os.path.join(self.dir, "run")
        self.train(run, "log.tensorboard=true")
        self.assertEqual(len(glob.glob(os.path.join(run, "events.out.tfevents.*"))), 1)
        self.check_equal(run)
        self.assertEqual([s for s, _ in scalars_of(run)["loss"]], list(range(8)))

    def test_a_resumed_run_shows_each_step_once(self):
        run = os.path.join(self.dir, "resumed")
        # All 8 steps, then again from the step-4 checkpoint (as after a crash
        # past it): steps 4..7 twice in the files, once in the reader.
        self.train(run, "log.tensorboard=true")
        ckpt = os.path.join(run, "checkpoints", "step_00000004")
        self.train(run, "log.tensorboard=true", f"checkpoint.resume={ckpt}")
        files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")),
                       key=os.path.getmtime)
        self.assertEqual(len(files), 2)
        # The resumed file starts with the version, then START at step 4.
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        events = list(EventFileLoader(files[1]).Load())
        self.assertEqual(events[0].file_version, "brain.Event:2")
        self.assertEqual(events[1].session_log.status, 1)  # SessionLog.START
        self.assertEqual(events[1].step, 4)
        self.assertEqual(events[2].step, 4)
        got = scalars_of(run)
        self.assertEqual([s for s, _ in got["loss"]], list(range(8)))
        self.check_equal(run)  # metrics.jsonl: steps 0-3 of the first run, 4-7 of the second

    def test_off_by_default(self):
        run = os.path.join(self.dir, "off")
        self.train(run, "train.steps=2")
        self.assertEqual(glob.glob(os.path.join(run, "events.out.tfevents.*")), [])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="a build folder with the trainer")
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build)
    unittest.main(argv=[sys.argv[0], *rest])
