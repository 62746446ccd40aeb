#!/usr/bin/env python3
"""The trainer's reliability promises (docs/RELIABILITY.md), checked on CPU
under mpirun, one scenario per ctest (label `reliability`):

  bad_config, bad_launch, bad_data, bad_checkpoint, bad_safetensors, bad_output
      every bad input: non-zero exit on every rank within 10 s, exactly one
      "error:" line naming the problem, the output directory (which holds a
      previous run's logs and checkpoints) byte-for-byte unchanged
  kill_resume       kill -9 of rank 1 at step 12 of 20 (checkpoint every 5): the
                    job ends within 30 s; the resume is bitwise the uninterrupted run
  kill_in_save      a kill in either phase of a save: the resume takes the previous
                    committed step and says so; nothing committed is lost
  hang              a rank that stops: the job aborts within collective_timeout_s +
                    10 s naming the step, the op and the rank
  nan               non-finite gradients on one rank: every rank skips the same step,
                    the loss curve goes on; train.max_skipped in a row stops the run
                    with a committed checkpoint
  sigterm           SIGTERM to mpirun mid-run: every rank exits 0 after a committed
                    checkpoint; the resume is bitwise the uninterrupted run
  pipeline          pp=2 x dp=2: a kill -9 ends the job within 30 s and the resume
                    is bitwise the uninterrupted run; a hung stage aborts the job
                    within collective_timeout_s + 10 s naming the step, the stage,
                    its action and the rank
  sigterm_one_rank  SIGTERM to one rank (by the pid it wrote): all ranks stop after
                    the same step, exit 0; SIGINT to a one-process run does the same

    python3 tests/reliability/reliability.py --build build --scenario kill_resume
    python3 tests/reliability/reliability.py --list

Faults are injected with TRAINER_FAULT (trainer/train/fault_injection.hpp);
processes are signalled by the pids the ranks write to <log.dir>/pids, never
by name. Standard library only. Exit status 1 on any broken promise.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import bad_inputs
import faults
from harness import REPO, Fail, Runner

SCENARIOS = {
    "bad_config": bad_inputs.bad_config, "bad_launch": bad_inputs.bad_launch,
    "bad_data": bad_inputs.bad_data, "bad_checkpoint": bad_inputs.bad_checkpoint,
    "bad_safetensors": bad_inputs.bad_safetensors, "bad_output": bad_inputs.bad_output,
    "kill_resume": faults.kill_resume, "kill_in_save": faults.kill_in_save,
    "hang": faults.hang, "nan": faults.nan, "sigterm": faults.sigterm,
    "sigterm_one_rank": faults.sigterm_one_rank, "pipeline": faults.pipeline,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--scenario", action="append", default=[], choices=sorted(SCENARIOS))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    work = tempfile.mkdtemp(prefix="gt_reliability_")
    runner = Runner(args.build, work)
    fails = []
    t0 = time.time()
    try:
        for name in args.scenario or list(SCENARIOS):
            try:
                fails += SCENARIOS[name](runner)
            except Fail as e:
                fails.append(f"{name}: {e}")
    finally:
        print(f"{time.time() - t0:.1f} s")
        if args.keep or fails:
            print(f"run directories kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for f in fails:
        print(f, file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
