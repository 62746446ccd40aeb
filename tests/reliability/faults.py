"""The fault scenarios: kills (also mid-save), a hang, NaN gradients and stop
signals, each compared with an uninterrupted run where a resume must equal it
bit for bit."""

import os
import signal
import subprocess
import time

from harness import (count_lines, error_lines, exit_codes, read_metrics, same_file, same_steps,
                     wait_for_steps)

def kill_resume(runner):
    fails = []
    ref_dir, ref_cfg = runner.config("uninterrupted")
    runner.train_ok(2, ref_cfg)
    run_dir, cfg = runner.config("killed")
    rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": "kill:rank=1:step=12"})
    print(f"killed run: exit {rc} after {took:.1f} s")
    if rc == 0 or "kill -9" not in out:
        fails.append(f"kill: rank 1 did not die at step 12 (exit {rc}):\n{out[-2000:]}")
    if took > 30:
        fails.append(f"kill: the job took {took:.1f} s to end (> 30 s)")
    committed = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    if "step_00000010" not in committed or "step_00000015" in committed:
        fails.append(f"kill: checkpoints after the kill: {committed}")
    out, took = runner.train_ok(2, cfg, ["checkpoint.resume=auto"])
    if "resumed from " + os.path.join(run_dir, "checkpoints", "step_00000010") not in out:
        fails.append(f"kill: the resume did not start from step 10:\n{out[-2000:]}")
    if "taking over the stale lock" not in out:
        fails.append("kill: the killed run's lock was not reported and taken over")
    fails += same_steps("kill resume", ref_dir, run_dir, range(10, 20))
    steps = count_lines(os.path.join(run_dir, "metrics.jsonl"))
    if steps != list(range(20)):
        fails.append(f"kill: metrics.jsonl steps {steps}, want 0..19 once each")
    if not same_file(os.path.join(ref_dir, "model.safetensors"),
                     os.path.join(run_dir, "model.safetensors")):
        fails.append("kill: final weights differ from the uninterrupted run")
    print(f"{'FAIL' if fails else 'ok  '} kill -9 of rank 1 at step 12, resume at step 10: "
          f"steps 10..19 {'differ' if fails else 'bitwise equal'}")
    return fails


def kill_in_save(runner):
    fails = []
    ref_dir, ref_cfg = runner.config("uninterrupted", extra={"checkpoint.keep": 1})
    runner.train_ok(2, ref_cfg)
    for fault in ("kill_in_save:rank=1:step=15:phase=shard",
                  "kill_in_save:rank=0:step=15:phase=manifest"):
        phase = fault.rsplit("=", 1)[1]
        run_dir, cfg = runner.config("save_" + phase, extra={"checkpoint.keep": 1})
        rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": fault})
        ck = os.path.join(run_dir, "checkpoints")
        names = sorted(os.listdir(ck))
        staging = [n for n in names if n.startswith(".step_00000015.tmp.")]
        if rc == 0 or "step_00000010" not in names or "step_00000015" in names or not staging:
            fails.append(f"{phase}: after the kill (exit {rc}) the checkpoints are {names}; want "
                         f"step_00000010 kept (keep=1) and only a staging dir of step 15")
        m = os.path.join(ck, "step_00000010", "manifest.json")
        if not os.path.exists(m):
            fails.append(f"{phase}: the committed step 10 lost its manifest")
        out, _ = runner.train_ok(2, cfg, ["checkpoint.resume=auto", "checkpoint.keep=1"])
        if not staging or f"ignoring checkpoint {os.path.join(ck, staging[0])}: uncommitted" not in out:
            fails.append(f"{phase}: the resume did not report the uncommitted save:\n{out[-2000:]}")
        if "resumed from " + os.path.join(ck, "step_00000010") + " at step 10" not in out:
            fails.append(f"{phase}: the resume did not use step 10:\n{out[-2000:]}")
        fails += same_steps(f"kill in save ({phase})", ref_dir, run_dir, range(10, 20))
        if not same_file(os.path.join(ref_dir, "model.safetensors"),
                         os.path.join(run_dir, "model.safetensors")):
            fails.append(f"{phase}: final weights differ from the uninterrupted run")
        left = sorted(os.listdir(ck))
        if any(n.startswith(".step_") for n in left):
            fails.append(f"{phase}: the dead save's staging dir outlived the next save: {left}")
        print(f"{'FAIL' if fails else 'ok  '} kill in save (phase {phase}): resumed from the "
              f"committed step 10, bitwise equal")
    return fails


def hang(runner):
    fails = []
    timeout_s = 3
    run_dir, cfg = runner.config("hang", extra={"runtime.collective_timeout_s": timeout_s})
    rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": "hang:rank=1:step=7"},
                               timeout=timeout_s + 60)
    fatal = [line for line in out.splitlines() if "fatal:" in line]
    ok = (rc != 0 and took <= timeout_s + 10 and fatal and "step 7" in fatal[0] and
          "all_reduce" in fatal[0] and "rank 0 on" in fatal[0] and
          "collective_timeout_s" in fatal[0])
    print(f"{'ok  ' if ok else 'FAIL'} hang of rank 1 at step 7: exit {rc} after {took:.1f} s "
          f"(timeout {timeout_s} s): {fatal[0] if fatal else 'no fatal line'}")
    if not ok:
        fails.append(f"hang: exit {rc} after {took:.1f} s:\n{out[-3000:]}")
    return fails


def nan(runner):
    fails = []
    ref_dir, ref_cfg = runner.config("reference")
    runner.train_ok(2, ref_cfg)
    run_dir, cfg = runner.config("nan")
    out, _ = runner.train_ok(2, cfg, env={"TRAINER_FAULT": "nan:rank=1:step=7"})
    skip_lines = [line for line in out.splitlines() if "update skipped" in line]
    for r in (0, 1):
        if not any(f"[rank {r}]" in line and "step 7:" in line for line in skip_lines):
            fails.append(f"nan: rank {r} did not say it skipped step 7")
    if any("step 7:" not in line for line in skip_lines):
        fails.append(f"nan: other steps skipped too: {skip_lines}")
    m = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    skipped = [s for s, rec in m.items() if rec.get("skipped")]
    if skipped != [7]:
        fails.append(f"nan: metrics.jsonl marks steps {skipped} skipped, want [7]")
    fails += same_steps("nan: before the fault", ref_dir, run_dir, range(0, 7))
    after = [m[s]["loss"] for s in range(8, 20)]
    if any(x is None for x in after) or len(after) != 12:
        fails.append(f"nan: the loss curve did not continue after step 7: {after}")
    print(f"{'FAIL' if fails else 'ok  '} nan on rank 1 at step 7: both ranks skipped step 7 "
          f"only, loss continued to {after[-1] if after else None}")

    # max_skipped in a row: the run stops, with the last good state committed.
    run_dir, cfg = runner.config("nan_limit", extra={"train.max_skipped": 3})
    exit_dir = runner.path("nan_limit_exit")
    os.makedirs(exit_dir)
    rc, out, took = runner.run(2, ["--config", cfg], exit_dir=exit_dir,
                               env={"TRAINER_FAULT": "nan:rank=1:step=7:count=10"})
    codes = exit_codes(exit_dir, 2)
    errs = error_lines(out)
    ck = os.path.join(run_dir, "checkpoints", "step_00000007", "manifest.json")
    ok = (rc != 0 and len(codes) == 2 and all(c != 0 for c in codes.values()) and len(errs) == 1
          and "train.max_skipped=3" in errs[0] and os.path.exists(ck))
    if ok:  # the checkpoint is the state before the first bad step: resumable, equal to ref's
        out2, _ = runner.train_ok(2, cfg, ["checkpoint.resume=auto", "train.steps=10"])
        ok = "at step 7" in out2
        fails += same_steps("nan limit: resumed", ref_dir, run_dir, range(7, 10))
    print(f"{'ok  ' if ok else 'FAIL'} nan in 10 steps, train.max_skipped=3: exit {rc}, ranks "
          f"{codes}, committed step_00000007: {os.path.exists(ck)}")
    if not ok:
        fails.append(f"nan limit: exit {rc}, ranks {codes}, errors {errs}:\n{out[-2500:]}")
    return fails


def stop_and_resume(runner, label, np, send, env=None):
    """Starts a long run, calls send(proc, run_dir) after 30 steps, then checks:
    every rank exits 0, a committed checkpoint of the last logged step, and a
    resume to 5 more steps bitwise equal to an uninterrupted run."""
    fails = []
    # log.every: once mpirun starts killing a job it stops draining the ranks'
    # output; a rank logging every few milliseconds fills its stdout pipe and
    # blocks there (see docs/RELIABILITY.md). Real steps log far less often.
    extra = {"train.steps": 100000, "checkpoint.every": 0, "log.every": 1000}
    run_dir, cfg = runner.config(label, extra=extra,
                                 parallel={"dp": 2} if np == 2 else {"dp": 1})
    exit_dir = runner.path(label + "_exit")
    os.makedirs(exit_dir)
    proc = runner.start(np, ["--config", cfg], env=env, exit_dir=exit_dir if np > 0 else None)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not wait_for_steps(proc, metrics, 30):
        os.killpg(proc.pid, signal.SIGKILL)
        return [f"{label}: the run did not reach step 30:\n{proc.communicate()[0][-2000:]}"]
    t0 = time.time()
    send(proc, run_dir)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
        fails.append(f"{label}: did not stop within 60 s")
    took = time.time() - t0
    steps = count_lines(metrics)
    n = len(steps)
    ck = os.path.join(run_dir, "checkpoints", f"step_{n:08d}")
    codes = exit_codes(exit_dir, np) if np > 0 else {0: proc.returncode}
    if np == 0 and proc.returncode != 0:
        fails.append(f"{label}: exit {proc.returncode}")
    if len(codes) != max(np, 1) or any(c != 0 for c in codes.values()):
        fails.append(f"{label}: per-rank exit statuses {codes}, want all 0")
    if steps != list(range(n)) or not os.path.exists(os.path.join(ck, "manifest.json")):
        fails.append(f"{label}: stopped after {n} logged steps but {ck} is not committed")
    if f"stopped by a signal (SIGTERM or SIGINT) after step {n}" not in out:
        fails.append(f"{label}: no stop message for step {n}:\n{out[-2000:]}")
    if not fails:
        ref_dir, ref_cfg = runner.config(label + "_ref", extra={"train.steps": n + 5},
                                         parallel={"dp": 2} if np == 2 else {"dp": 1})
        runner.train_ok(np, ref_cfg)
        runner.train_ok(np, cfg, ["checkpoint.resume=auto", f"train.steps={n + 5}"])
        fails += same_steps(f"{label} resume", ref_dir, run_dir, range(n, n + 5))
        if not same_file(os.path.join(ref_dir, "model.safetensors"),
                         os.path.join(run_dir, "model.safetensors")):
            fails.append(f"{label}: final weights after the resume differ from the uninterrupted run")
    print(f"{'FAIL' if fails else 'ok  '} {label}: stopped {took:.1f} s after the signal at step "
          f"{n}, ranks exited {codes} (launcher exit {proc.returncode}), resume bitwise equal")
    return fails


def sigterm(runner):
    # Open MPI's mpirun forwards SIGTERM only after odls_base_sigkill_timeout
    # (it sends SIGCONT first), then SIGKILLs that long later: 10 s leaves the
    # ranks time to finish the step and commit on a loaded machine (3 s did
    # not while the rest of the suite shared the 2 cores). mpirun
    # itself always exits 1 after a SIGTERM (Open MPI 4.1), whatever the ranks
    # return: each rank's own exit status is what is checked.
    def send(proc, _run_dir):
        os.kill(proc.pid, signal.SIGTERM)
    return stop_and_resume(runner, "sigterm_mpirun", 2, send,
                           env={"OMPI_MCA_odls_base_sigkill_timeout": "10"})


def sigterm_one_rank(runner):
    def send_rank1(_proc, run_dir):
        with open(os.path.join(run_dir, "pids", "rank_1.pid")) as f:
            os.kill(int(f.readline()), signal.SIGTERM)

    def send_sigint(_proc, run_dir):
        with open(os.path.join(run_dir, "pids", "rank_0.pid")) as f:
            os.kill(int(f.readline()), signal.SIGINT)
    fails = stop_and_resume(runner, "sigterm_rank1", 2, send_rank1)
    fails += stop_and_resume(runner, "sigint_one_process", 0, send_sigint)
    return fails


def pipeline(runner):
    """A pipeline pp=2 x dp=2 (4 ranks): a killed rank ends the job within
    30 s; non-finite gradients on the last stage make both stages skip the
    same step; a pipeline pp=2 whose last stage hangs aborts within the collective
    timeout, the fatal line naming the step, the stage, its action (a recv
    from the hung stage) and the rank; a resume at step 10 of the killed job
    equals the uninterrupted run bit for bit."""
    fails = []
    pp_dp = {"pp": 2, "dp": 2}
    ref_dir, ref_cfg = runner.config("pp_uninterrupted", parallel=pp_dp,
                                     extra={"train.micro_batch": 1})
    runner.train_ok(4, ref_cfg)
    run_dir, cfg = runner.config("pp_killed", parallel=pp_dp, extra={"train.micro_batch": 1})
    rc, out, took = runner.run(4, ["--config", cfg], env={"TRAINER_FAULT": "kill:rank=3:step=12"})
    ok = rc != 0 and took <= 30 and "kill -9" in out
    print(f"{'ok  ' if ok else 'FAIL'} pp=2 x dp=2, kill -9 of rank 3 (last stage) at step 12: "
          f"exit {rc} after {took:.1f} s")
    if not ok:
        fails.append(f"pipeline kill: exit {rc} after {took:.1f} s:\n{out[-2000:]}")
    out, _ = runner.train_ok(4, cfg, ["checkpoint.resume=auto"])
    if "resumed from " + os.path.join(run_dir, "checkpoints", "step_00000010") not in out:
        fails.append(f"pipeline kill: the resume did not start from step 10:\n{out[-2000:]}")
    fails += same_steps("pipeline kill resume", ref_dir, run_dir, range(10, 20))
    if not same_file(os.path.join(ref_dir, "model.safetensors"),
                     os.path.join(run_dir, "model.safetensors")):
        fails.append("pipeline kill: final weights differ from the uninterrupted run")

    # Non-finite gradients on the last stage: both stages skip the same step.
    run_dir, cfg = runner.config("pp_nan", parallel={"pp": 2},
                                 extra={"train.micro_batch": 2, "train.steps": 10})
    out, _ = runner.train_ok(2, cfg, env={"TRAINER_FAULT": "nan:rank=1:step=7"})
    skips = [line for line in out.splitlines() if "update skipped" in line]
    ok = all(any(f"[rank {r}]" in line and "step 7:" in line for line in skips) for r in (0, 1))
    ok = ok and all("step 7:" in line for line in skips)
    print(f"{'ok  ' if ok else 'FAIL'} pp=2, nan on rank 1 (last stage) at step 7: "
          f"{len(skips)} skip line(s), all step 7")
    if not ok:
        fails.append(f"pipeline nan: skip lines {skips}:\n{out[-2000:]}")

    timeout_s = 3
    run_dir, cfg = runner.config("pp_hang", parallel={"pp": 2},
                                 extra={"runtime.collective_timeout_s": timeout_s,
                                        "train.micro_batch": 2})
    rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": "hang:rank=1:step=7"},
                               timeout=timeout_s + 60)
    fatal = [line for line in out.splitlines() if "fatal:" in line]
    ok = (rc != 0 and took <= timeout_s + 10 and fatal and "step 7" in fatal[0] and
          "pipeline stage 0" in fatal[0] and "recv_grad" in fatal[0] and
          "rank 0 on" in fatal[0] and "collective_timeout_s" in fatal[0])
    print(f"{'ok  ' if ok else 'FAIL'} pp=2, hang of rank 1 (stage 1) at step 7: exit {rc} after "
          f"{took:.1f} s (timeout {timeout_s} s): {fatal[0] if fatal else 'no fatal line'}")
    if not ok:
        fails.append(f"pipeline hang: exit {rc} after {took:.1f} s:\n{out[-3000:]}")
    return fails
