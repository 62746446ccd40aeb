#!/usr/bin/env python3
"""Run one rank's command and record its exit status, for tests that must see
every rank's exit code (mpirun reports only one).

    mpirun -np 2 python3 rank_exit.py EXIT_DIR build/trainer --config ...

Writes EXIT_DIR/rank_<OMPI_COMM_WORLD_RANK> with the status ("-15" for a
signal). SIGTERM and SIGINT are passed on to the command (mpirun sends them
to its direct children, this wrapper), and the wrapper itself waits on.
"""
import os
import signal
import subprocess
import sys


def main():
    exit_dir, cmd = sys.argv[1], sys.argv[2:]
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    child = subprocess.Popen(cmd)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _frame: child.send_signal(s))
    rc = child.wait()
    with open(os.path.join(exit_dir, f"rank_{rank}"), "w") as f:
        f.write(f"{rc}\n")
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
