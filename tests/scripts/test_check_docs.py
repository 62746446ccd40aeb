#!/usr/bin/env python3
"""scripts/check_docs.py: the real docs pass, and broken docs fail.

The docs check is only worth its minute if it fails when a documented
command or name breaks, so besides running it on README.md and docs/*.md
(every `run` block, the whole check) this builds small doc trees (--root)
that each break one thing and checks that the check fails with the
FILE:LINE of the break: a `run` command that exits non-zero, a command past
its timeout, a `norun:` block naming a config that does not exist, an
unknown --flag of `trainer sample`, an unknown config key, a shell block
without a marker, a README over 250 lines (250 pass). And that a `run`
marker's overrides replace the command's own (train.steps=50 runs 2 steps)
and that a later block sees an earlier block's run folder. Everything but
the real docs runs with --no-run or a single quick command.

    python3 tests/scripts/test_check_docs.py --build build     # ~1-2 min on 2 cores
"""

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(REPO, "scripts", "check_docs.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import check_docs  # noqa: E402  (standard library only)

BUILD = os.path.join(REPO, "build")


def check(*args):
    """(exit status, combined output) of check_docs.py with these arguments."""
    p = subprocess.run([sys.executable, CHECK, "--build", BUILD, *args],
                       capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout + p.stderr


class DocTree:
    """A temporary --root with docs/*.md (and README.md) as given."""

    def __init__(self, files):
        self.tmp = tempfile.TemporaryDirectory(prefix="check_docs_test.")
        self.root = self.tmp.name
        os.makedirs(os.path.join(self.root, "docs"))
        for name, text in files.items():
            with open(os.path.join(self.root, name), "w") as f:
                f.write(textwrap.dedent(text).lstrip("\n"))

    def __enter__(self):
        return self.root

    def __exit__(self, *exc):
        self.tmp.cleanup()


class RealDocs(unittest.TestCase):
    def test_the_docs_pass(self):
        status, out = check()
        self.assertEqual(status, 0, out)
        self.assertRegex(out, r"docs check: [1-9]\d* blocks run, \d+ checked for names, \d+ files")


class BrokenDocs(unittest.TestCase):
    def test_a_failing_run_command_names_its_line(self):
        with DocTree({"docs/BROKEN.md": """
                # Broken

                ```sh run
                build/trainer sample --checkpoint runs/none/checkpoints/step_00000001
                ```
                """}) as root:
            status, out = check("--root", root)
        self.assertEqual(status, 1, out)
        self.assertIn("docs/BROKEN.md:4: exit status 1: build/trainer sample", out)
        self.assertIn("error:", out)  # the command's own last lines follow

    def test_an_unknown_key_fails_as_a_name_and_as_a_run(self):
        with DocTree({"docs/BROKEN.md": """
                # Broken

                ```sh run
                build/trainer --config configs/default.yaml train.no_such_key=1
                ```
                """}) as root:
            status, out = check("--root", root)
        self.assertEqual(status, 1, out)
        self.assertIn("docs/BROKEN.md:4: train.no_such_key is not a config key", out)
        self.assertIn("docs/BROKEN.md:4: exit status 1:", out)
        self.assertIn("unknown key 'train.no_such_key'", out)

    def test_a_command_past_its_timeout_fails(self):
        with DocTree({"docs/SLOW.md": """
                # Slow

                ```sh run
                sleep 30
                ```
                """}) as root:
            status, out = check("--root", root, "--timeout", "1")
        self.assertEqual(status, 1, out)
        self.assertIn("docs/SLOW.md:4: timed out after 1 s: sleep 30", out)

    def test_a_missing_config_in_a_norun_block_fails(self):
        with DocTree({"docs/BROKEN.md": """
                # Broken

                ```sh norun: needs a GPU
                build/trainer --config configs/does_not_exist.yaml
                ```
                """}) as root:
            status, out = check("--root", root, "--no-run")
        self.assertEqual(status, 1, out)
        self.assertIn("docs/BROKEN.md:4: configs/does_not_exist.yaml does not exist", out)

    def test_an_unknown_flag_of_trainer_sample_fails(self):
        with DocTree({"docs/BROKEN.md": """
                # Broken

                ```sh norun: reads a checkpoint
                build/trainer sample --checkpoint runs/x/checkpoints/step_00000010 --nucleus 0.9
                ```

                Inline too: `build/trainer sample --checkpoint DIR --beam 4`.
                """}) as root:
            status, out = check("--root", root, "--no-run")
        self.assertEqual(status, 1, out)
        self.assertIn("docs/BROKEN.md:4: `trainer sample` has no flag --nucleus", out)
        self.assertIn("docs/BROKEN.md:7: `trainer sample` has no flag --beam", out)

    def test_an_unmarked_shell_block_fails(self):
        with DocTree({"docs/BROKEN.md": """
                # Broken

                ```bash
                build/trainer --config configs/default.yaml
                ```

                ```text
                output is fine unmarked
                ```
                """}) as root:
            status, out = check("--root", root, "--no-run")
        self.assertEqual(status, 1, out)
        self.assertIn("docs/BROKEN.md:3: shell block without a `run` or `norun:` marker", out)
        self.assertNotIn("BROKEN.md:7", out)

    def test_readme_over_250_lines_fails(self):
        for lines, want in ((250, 0), (251, 1)):
            body = "# README\n" + "".join(f"line {i}\n" for i in range(lines - 1))
            with DocTree({"README.md": body}) as root:
                status, out = check("--root", root, "--no-run")
            self.assertEqual(status, want, f"{lines} lines: {out}")
            if want:
                self.assertIn("README.md:251: README.md has 251 lines, at most 250", out)

    def test_marker_overrides_replace_the_commands_and_blocks_share_a_folder(self):
        with DocTree({"docs/OK.md": """
                # Fine

                ```sh run train.steps=2 log.dir=runs/short
                build/trainer --config configs/default.yaml train.steps=50 log.dir=runs/long
                ```

                ```sh run
                test "$(wc -l < runs/short/metrics.jsonl)" -eq 2 && test ! -e runs/long
                ```
                """}) as root:
            status, out = check("--root", root)
        self.assertEqual(status, 0, out)
        self.assertIn("docs check: 2 blocks run, 2 checked for names, 1 files", out)


class Overrides(unittest.TestCase):
    def test_only_training_invocations_get_them(self):
        ov = ["train.steps=3", "log.every=1"]
        self.assertEqual(
            check_docs.with_overrides(
                "mpirun -np 2 build/trainer --config c.yaml train.steps=20 parallel.dp=2  # dp", ov),
            "mpirun -np 2 build/trainer --config c.yaml train.steps=3 parallel.dp=2 log.every=1  # dp")
        for cmd in ("build/trainer sample --checkpoint d --tokens 5",
                    "build/trainer plan --config c.yaml --hardware h.yaml --gpus 8",
                    "scripts/sweep.py --world 2 --config c.yaml"):
            self.assertEqual(check_docs.with_overrides(cmd, ov), cmd)
        self.assertEqual(
            check_docs.with_overrides("true && build/trainer train --config c.yaml | tail -1", ov),
            "true && build/trainer train --config c.yaml train.steps=3 log.every=1 | tail -1")


def main():
    global BUILD
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=BUILD)
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
