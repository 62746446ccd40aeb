#!/usr/bin/env python3
"""The docs check: what README.md and docs/*.md tell a reader to type works.

Docs rot quietly: a config is renamed, a flag dropped, a default changed, and
the README's commands fail for the next reader while every test passes. This
check reads the Markdown and holds it to the repository:

  markers  every shell block (```sh, ```bash, ```shell, ```console) says
           whether it runs. The info string is the marker (docs/TRAINING.md,
           "Docs conventions", says the same for the docs' writers):
             ```sh run                       the check runs the block as written
             ```sh run train.steps=3 ...     the same, with these key=value
                                             overrides given to every training
                                             invocation in the block (below)
             ```sh norun: <reason>           not run (needs a GPU, hosts, Slurm,
                                             a download, minutes...), names checked
           A shell block without one is a failure. Output and examples that
           are not commands go in ```text blocks.
  names    in the whole file: every path that looks like configs/...yaml,
           scripts/....py|sh|sbatch, docs/....md or tests/... exists in the
           repository; every relative Markdown link's file exists and its
           #anchor is a heading there. In shell blocks, `$ ` lines of other
           blocks and inline code: every --flag after build/trainer
           <subcommand> is in `trainer --help` (one usage text for all
           subcommands, cut per subcommand; a training invocation gets the
           `trainer [train]` line's flags), every --flag after
           scripts/NAME.py is in `python3 scripts/NAME.py --help` (run once
           per script and cached; a script without argparse, and every .sh,
           is searched for the flag in its source instead, since running it
           would do its work), and every section.key=value names a config
           key. The keys are read from the trainer's own key table,
           trainer/config/schema.cpp (its bind<...>("section", "key")
           entries, from which the trainer's unknown-key check is built): the
           trainer has no validate-only mode, and starting it per override
           would also judge each value against an unrelated config. A table
           that no longer parses (fewer than 30 keys, or no train.steps) is
           itself a failure, so a change of its form cannot pass silently.
  runs     every `run` block, in file order, one scratch directory per file,
           so a later block uses an earlier one's run folder (train, then
           sample from its checkpoint). The scratch directory holds symlinks
           to the repository's build (or --build), configs, scripts, tests,
           kernels, trainer, parallel, emulator, docs, README.md and
           CMakeLists.txt, so what commands write (runs/, out/) lands there.
           Its data/ is not the repository's: data/repo/ is prepared once per
           check with `scripts/prepare_data.py --out-dir` from the
           repository's text (under a second), so the check needs no earlier
           preparation and never rewrites the repository's data/. Each command
           (a line; `\\` continues it) runs with `bash -c` in that directory,
           capped at --timeout seconds (60), with OMPI_ALLOW_RUN_AS_ROOT=1,
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 and
           OMPI_MCA_rmaps_base_oversubscribe=1 set, so `mpirun -np 4` lines
           run unchanged on a 2-core machine. A failing command ends its
           block. Overrides of a `run` marker go to every training invocation
           (build/trainer [train] --config ..., also behind mpirun; not
           sample, export, plan, costs or bench): a key the command already
           sets gets the marker's value, others are appended, since the
           trainer refuses a key given twice.

Every failure is one line, FILE:LINE: what failed, and a run's last output
lines after it; the exit status is 1 if any. README.md (at --root) must be
at most 250 lines: it is the front door, the rest lives in docs/.

    python3 scripts/check_docs.py                 # all of it (about a minute on 2 cores)
    python3 scripts/check_docs.py --no-run        # markers and names only (seconds)
    python3 scripts/check_docs.py --only docs/PARALLELISM.md
    python3 scripts/check_docs.py --list          # every shell block and its marker
    python3 scripts/check_docs.py --root DIR      # DIR/README.md and DIR/docs/*.md
                                                  # (tools and configs from this repo)
"""

import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 250
SHELL_LANGS = {"sh", "bash", "shell", "console", "zsh", "shell-session"}
TRAINER_SUBCOMMANDS = ("sample", "export", "bench", "plan", "costs")
# What the scratch directory links to in the repository (build is --build).
SCRATCH_LINKS = ("configs", "scripts", "tests", "kernels", "trainer", "parallel",
                 "emulator", "docs", "README.md", "CMakeLists.txt")
OUTPUT_TAIL_LINES = 15

# Paths the docs name: configs/...yaml, scripts/...(py|sh|sbatch), docs/...md,
# tests/... . Not preceded by a path character (build/tests/gt_tests is a
# build output, not tests/gt_tests).
PATH_RE = re.compile(
    r"(?<![\w./~-])("
    r"configs/[\w./-]*\.yaml"
    r"|scripts/[\w./-]*\.(?:py|sh|sbatch)"
    r"|docs/[\w./-]*\.md"
    r"|tests/[\w./-]*[\w/]"
    r")")
# A character right after a match that makes it a pattern, not a path
# (tests/layouts/cp_*.py, configs/hardware/<name>.yaml).
PATTERN_CHARS = "*?<{["
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE_RE = re.compile(r"(`+)([^`]+?)\1(?!`)")
TRAINER_RE = re.compile(r"(?:^|(?<=[\s;&|(]))((?:\./)?build[\w.-]*/trainer)(?=\s|$)")
SCRIPT_RE = re.compile(r"(?:^|(?<=[\s;&|(=]))((?:\./)?scripts/[\w/.-]+\.(?:py|sh|sbatch))(?=\s|$)")
FLAG_RE = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
SEGMENT_SPLIT_RE = re.compile(r"\s(?:&&|\|\||;|\|)\s|\s#|^#")


class Failure(Exception):
    pass


# ----------------------------------------------------------------- Markdown

class Block:
    """A fenced code block: its language, marker and lines (1-based)."""

    def __init__(self, path, line, info, lines):
        self.path, self.line, self.info, self.lines = path, line, info.strip(), lines
        words = self.info.split()
        self.lang = words[0].lower() if words else ""
        self.marker, self.reason, self.overrides = None, "", []
        if len(words) > 1:
            if words[1] == "run":
                self.marker, self.overrides = "run", words[2:]
            elif words[1].startswith("norun:") or words[1] == "norun":
                self.marker = "norun"
                self.reason = self.info.split("norun", 1)[1].lstrip(":").strip()

    @property
    def is_shell(self):
        return self.lang in SHELL_LANGS

    def commands(self):
        """(line, text) of each command: lines joined over `\\` continuations,
        comments and blank lines dropped; in console blocks only `$ ` lines."""
        out, pending, start = [], "", None
        for n, text in self.lines:
            if self.lang in ("console", "shell-session") and not pending:
                if not text.lstrip().startswith("$ "):
                    continue
                text = text.lstrip()[2:]
            if not pending and (not text.strip() or text.lstrip().startswith("#")):
                continue
            if start is None:
                start = n
            if text.rstrip().endswith("\\"):
                pending += text.rstrip()[:-1] + " "
                continue
            out.append((start, pending + text))
            pending, start = "", None
        if pending:
            out.append((start, pending))
        return out


def parse_markdown(path):
    """The file's lines, its fenced blocks, and its inline code spans outside
    blocks as (line, text)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blocks, spans = [], []
    paragraph = []  # (line, text) of the prose lines since the last blank or fence

    def end_paragraph():
        # Inline code may run over a line break: find spans in the paragraph.
        if paragraph:
            text = "\n".join(t for _, t in paragraph)
            starts, pos = [], 0
            for n, t in paragraph:
                starts.append((pos, n))
                pos += len(t) + 1
            for sm in INLINE_CODE_RE.finditer(text):
                line = max(n for p, n in starts if p <= sm.start())
                spans.append((line, " ".join(sm.group(2).split())))
            paragraph.clear()

    fence = None  # (indent, char, length, start line, info, collected)
    for i, raw in enumerate(lines, 1):
        if fence is None:
            m = re.match(r"^( {0,3}|\s*)(`{3,}|~{3,})(.*)$", raw)
            if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                end_paragraph()
                fence = (len(m.group(1)), m.group(2)[0], len(m.group(2)), i, m.group(3), [])
                continue
            if raw.strip():
                paragraph.append((i, raw))
            else:
                end_paragraph()
        else:
            indent, ch, length, start, info, body = fence
            m = re.match(r"^\s*(`{3,}|~{3,})\s*$", raw)
            if m and m.group(1)[0] == ch and len(m.group(1)) >= length:
                blocks.append(Block(path, start, info, body))
                fence = None
                continue
            strip = min(indent, len(raw) - len(raw.lstrip(" ")))
            body.append((i, raw[strip:]))
    end_paragraph()
    if fence is not None:
        blocks.append(Block(path, fence[3], fence[4], fence[5]))
    return lines, blocks, spans


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces
    to hyphens (inline code keeps its text)."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        found, seen = set(), {}
        in_fence = False
        with open(path, encoding="utf-8") as f:
            for raw in f:
                if re.match(r"^\s*(`{3,}|~{3,})", raw):
                    in_fence = not in_fence
                    continue
                m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", raw)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    found.add(s if n == 0 else f"{s}-{n}")
        _anchor_cache[path] = found
    return _anchor_cache[path]


# ----------------------------------------------------------------- tools

class Tools:
    """What the docs' commands are checked against: the trainer's usage text,
    the scripts' --help, the config key table."""

    def __init__(self, repo, build):
        self.repo, self.build = repo, build
        self._trainer_flags = None
        self._script_flags = {}
        self.keys, self.sections = self._read_schema()

    def _read_schema(self):
        path = os.path.join(self.repo, "trainer", "config", "schema.cpp")
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
        except OSError as e:
            raise Failure(f"{path}: cannot read the config key table ({e.strerror})")
        pairs = re.findall(r"\bbind<[^>]*>\(\s*\"(\w+)\",\s*\"(\w+)\"\s*\)", src)
        keys = {f"{s}.{k}" for s, k in pairs}
        if len(keys) < 30 or "train.steps" not in keys:
            raise Failure(f"{path}: found {len(keys)} keys in its bind<...>(\"section\", \"key\") "
                          "entries, expected the whole table (train.steps among them): "
                          "scripts/check_docs.py must learn the table's new form")
        return keys, {k.split(".")[0] for k in keys}

    def trainer_flags(self, sub):
        """Flags of `trainer <sub>` from `trainer --help`, which prints one
        usage text with a `trainer <sub> ...` paragraph per subcommand
        (`trainer [train] ...` for training)."""
        if self._trainer_flags is None:
            exe = os.path.join(self.build, "trainer")
            try:
                p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
            except OSError as e:
                raise Failure(f"{exe}: cannot run it for its --help ({e.strerror}); build it first")
            text = p.stdout + p.stderr
            table, current = {}, None
            for line in text.splitlines():
                m = re.match(r"^\s*trainer\s+(\[train\]|\w+)", line)
                if m:
                    current = "train" if m.group(1) == "[train]" else m.group(1)
                    table.setdefault(current, set())
                if current:
                    table[current].update(FLAG_RE.findall(line))
            if "train" not in table or "--config" not in table["train"]:
                raise Failure(f"{exe} --help: no `trainer [train] --config` usage line in "
                              f"its output (exit {p.returncode}): {text.strip()[:200]!r}")
            self._trainer_flags = table
        return self._trainer_flags.get(sub)

    def script_flags(self, rel):
        """(flags, how): from --help for argparse scripts, else the flags that
        appear in the script's source."""
        if rel not in self._script_flags:
            path = os.path.join(self.repo, rel)
            with open(path, encoding="utf-8", errors="replace") as f:
                src = f.read()
            flags, how = None, "its source"
            if rel.endswith(".py") and "argparse" in src:
                try:
                    p = subprocess.run([sys.executable, path, "--help"], capture_output=True,
                                       text=True, timeout=60, cwd=self.repo)
                    if p.returncode == 0 and "usage" in p.stdout.lower():
                        flags, how = set(FLAG_RE.findall(p.stdout)), "--help"
                except subprocess.TimeoutExpired:
                    pass
            if flags is None:
                flags = set(FLAG_RE.findall(src))
            self._script_flags[rel] = (flags, how)
        return self._script_flags[rel]


# ----------------------------------------------------------------- names

def segments(command):
    """A command line cut at &&, ||, ;, pipes and comments."""
    out, pos = [], 0
    for m in SEGMENT_SPLIT_RE.finditer(command):
        out.append(command[pos:m.start()])
        if m.group(0).strip().startswith("#"):
            return out
        pos = m.end()
    out.append(command[pos:])
    return out


def check_command(where, command, tools, failures, inline=False):
    """Flags and config keys of one command line (or an inline code span)."""
    for seg in segments(command):
        m = TRAINER_RE.search(seg)
        if m is None and inline:
            m = re.match(r"^\s*(trainer)(?=\s|$)", seg)
        ms = SCRIPT_RE.search(seg)
        if m and (ms is None or m.start() < ms.start()):
            rest = seg[m.end():]
            words = rest.split()
            sub = words[0] if words and words[0] in TRAINER_SUBCOMMANDS + ("train",) else "train"
            allowed = tools.trainer_flags(sub)
            for flag in FLAG_RE.findall(rest):
                if flag == "--help":
                    continue
                if allowed is None or flag not in allowed:
                    failures.append(f"{where}: `trainer {sub}` has no flag {flag} "
                                    f"(not in `trainer --help`): {command.strip()}")
        elif ms:
            rel = ms.group(1)[2:] if ms.group(1).startswith("./") else ms.group(1)
            if os.path.isfile(os.path.join(tools.repo, rel)):
                flags, how = tools.script_flags(rel)
                for flag in FLAG_RE.findall(seg[ms.end():]):
                    if flag != "--help" and flag not in flags:
                        failures.append(f"{where}: {rel} has no flag {flag} (not in {how}): "
                                        f"{command.strip()}")
        for word in seg.split():
            km = re.match(r"^['\"]?([a-z_]+)\.([A-Za-z_]\w*)(\.[\w.]*)?=", word)
            if km and km.group(1) in tools.sections:
                key = f"{km.group(1)}.{km.group(2)}"
                if km.group(3):
                    failures.append(f"{where}: {key}{km.group(3)}: an override is section.key=value "
                                    f"(one section, one key): {command.strip()}")
                elif key not in tools.keys:
                    failures.append(f"{where}: {key} is not a config key "
                                    f"(trainer/config/schema.cpp): {command.strip()}")


def check_names(path, shown, lines, blocks, spans, tools, failures):
    in_block = set()
    for b in blocks:
        in_block.update(n for n, _ in b.lines)
    for n, text in enumerate(lines, 1):
        for m in PATH_RE.finditer(text):
            p = m.group(1).rstrip(".")
            after = text[m.end():m.end() + 1]
            if after and after in PATTERN_CHARS:
                continue
            if not os.path.exists(os.path.join(tools.repo, p)):
                failures.append(f"{shown}:{n}: {p} does not exist in the repository")
        if n in in_block:
            continue
        for m in LINK_RE.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else os.path.normpath(
                os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(dest):
                failures.append(f"{shown}:{n}: link to {file_part}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                failures.append(f"{shown}:{n}: link to {target}: "
                                f"{os.path.basename(dest)} has no heading #{anchor}")
    for b in blocks:
        if b.is_shell:
            for n, cmd in b.commands():
                check_command(f"{shown}:{n}", cmd, tools, failures)
            for word in b.overrides:
                check_command(f"{shown}:{b.line}", word, tools, failures)
                if "=" not in word:
                    failures.append(f"{shown}:{b.line}: `run` marker word {word!r} is not "
                                    "a key=value override")
        else:
            for n, text in b.lines:
                if text.lstrip().startswith("$ "):
                    check_command(f"{shown}:{n}", text.lstrip()[2:], tools, failures)
    for n, text in spans:
        check_command(f"{shown}:{n}", text, tools, failures, inline=True)


# ----------------------------------------------------------------- runs

def is_training(seg):
    m = TRAINER_RE.search(seg)
    if not m:
        return False
    words = seg[m.end():].split()
    return bool(words) and words[0] not in TRAINER_SUBCOMMANDS and (
        words[0] == "--config" or (words[0] == "train" and "--config" in words))


def with_overrides(command, overrides):
    """The command with the marker's overrides given to each training
    invocation: an existing key=... gets the marker's value, the rest go at the
    invocation's end (before a comment or the next command)."""
    if not overrides:
        return command
    out, pos = [], 0
    cuts = [(m.start(), m.end()) for m in SEGMENT_SPLIT_RE.finditer(command)]
    pieces = []
    for start, end in cuts:
        pieces.append((command[pos:start], command[start:end]))
        pos = end
    pieces.append((command[pos:], ""))
    for seg, sep in pieces:
        if is_training(seg):
            body = seg.rstrip()
            trailing = seg[len(body):]
            for ov in overrides:
                key = ov.split("=", 1)[0]
                pattern = re.compile(r"(?<=\s)" + re.escape(key) + r"=\S*")
                if pattern.search(body):
                    body = pattern.sub(lambda _m: ov, body)
                else:
                    body += " " + ov
            seg = body + (trailing or (" " if sep.strip().startswith("#") else ""))
        out.append(seg + sep)
    return "".join(out)


def run_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def make_scratch(parent, name, repo, build, data_dir):
    d = os.path.join(parent, name)
    os.makedirs(d)
    os.symlink(os.path.abspath(build), os.path.join(d, "build"))
    for entry in SCRATCH_LINKS:
        src = os.path.join(repo, entry)
        if os.path.exists(src):
            os.symlink(src, os.path.join(d, entry))
    os.symlink(data_dir, os.path.join(d, "data"))
    return d


def prepare_data(repo, parent):
    """data/repo/ for the runs, from the repository's text, in the check's
    own directory (prepare_data.py run as written from a scratch copy would
    tokenize the scratch folder; run in the repository it would rewrite
    data/)."""
    data = os.path.join(parent, "data")
    cmd = [sys.executable, os.path.join(repo, "scripts", "prepare_data.py"),
           "--out-dir", os.path.join(data, "repo")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-OUTPUT_TAIL_LINES:])
        raise Failure(f"scripts/prepare_data.py --out-dir {data}/repo failed "
                      f"(exit {p.returncode}), so no block could run:\n{tail}")
    return data


def run_command(command, cwd, timeout):
    """(exit status or None on timeout, combined output)."""
    p = subprocess.Popen(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=run_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return None, out


def tail(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-OUTPUT_TAIL_LINES:])


def run_blocks(shown, blocks, scratch, timeout, failures, timings):
    for b in blocks:
        if not (b.is_shell and b.marker == "run"):
            continue
        t0 = time.monotonic()
        for n, cmd in b.commands():
            full = with_overrides(cmd, b.overrides)
            status, out = run_command(full, scratch, timeout)
            if status is None or status != 0:
                what = f"timed out after {timeout:g} s" if status is None else f"exit status {status}"
                failures.append(f"{shown}:{n}: {what}: {full.strip()}"
                                + ("\n" + tail(out) if out.strip() else ""))
                break
        timings.append((f"{shown}:{b.line}", time.monotonic() - t0,
                        b.commands()[0][1].strip() if b.commands() else ""))


# ----------------------------------------------------------------- main

def doc_files(root, only, files):
    if files:
        found = [os.path.abspath(f) for f in files]
    else:
        found = [os.path.join(root, "README.md")] if os.path.exists(
            os.path.join(root, "README.md")) else []
        found += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    if only:
        wanted = {os.path.normpath(os.path.join(root, o)) for o in only} | {
            os.path.abspath(o) for o in only}
        missing = [o for o in only if not ({os.path.normpath(os.path.join(root, o)),
                                            os.path.abspath(o)} & set(found))]
        if missing:
            raise Failure(f"--only {missing[0]}: not one of the checked files")
        found = [f for f in found if f in wanted]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=REPO,
                    help="where README.md and docs/*.md are (default: this repository)")
    ap.add_argument("--files", nargs="+", help="check these Markdown files instead")
    ap.add_argument("--only", action="append", help="check only FILE (relative to --root); repeatable")
    ap.add_argument("--no-run", action="store_true", help="markers and names only")
    ap.add_argument("--list", action="store_true",
                    help="list every shell block with its marker, check nothing")
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="the build whose trainer the docs' build/ means (default: build)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per command (60)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directories")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    t_start = time.monotonic()
    try:
        files = doc_files(root, args.only, args.files)
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def shown(path):
        rel = os.path.relpath(path, root)
        return path if rel.startswith("..") else rel

    parsed = {f: parse_markdown(f) for f in files}
    if args.list:
        for f in files:
            for b in parsed[f][1]:
                if b.is_shell:
                    what = {"run": "run" + ("".join(" " + o for o in b.overrides)),
                            "norun": f"norun: {b.reason}"}.get(b.marker, "UNMARKED")
                    first = b.commands()[0][1].strip() if b.commands() else ""
                    print(f"{shown(f)}:{b.line}: {what}\n    {first[:110]}")
        return 0

    failures = []
    try:
        tools = Tools(REPO, args.build)
    except Failure as e:
        print(f"{e}", file=sys.stderr)
        return 1
    checked = 0
    for f in files:
        lines, blocks, spans = parsed[f]
        name = shown(f)
        if os.path.basename(f) == "README.md" and os.path.dirname(f) == root \
                and len(lines) > README_MAX_LINES:
            failures.append(f"{name}:{README_MAX_LINES + 1}: README.md has {len(lines)} lines, "
                            f"at most {README_MAX_LINES}: move detail into docs/")
        for b in blocks:
            if not b.is_shell:
                continue
            checked += 1
            if b.marker is None:
                failures.append(f"{name}:{b.line}: shell block without a `run` or `norun:` marker")
            elif b.marker == "norun" and not b.reason:
                failures.append(f"{name}:{b.line}: `norun:` marker without a reason")
        try:
            check_names(f, name, lines, blocks, spans, tools, failures)
        except Failure as e:
            failures.append(f"{name}: {e}")

    ran, timings = 0, []
    if not args.no_run:
        to_run = [f for f in files if any(b.is_shell and b.marker == "run" for b in parsed[f][1])]
        if to_run:
            parent = tempfile.mkdtemp(prefix="check_docs.")
            try:
                t0 = time.monotonic()
                data = prepare_data(REPO, parent)
                print(f"docs check: data/repo prepared in {time.monotonic() - t0:.1f} s "
                      f"({parent}/data)", flush=True)
                for i, f in enumerate(to_run):
                    scratch = make_scratch(parent, f"{i}_{os.path.basename(f)}", REPO,
                                           args.build, data)
                    before = len(timings)
                    run_blocks(shown(f), parsed[f][1], scratch, args.timeout, failures, timings)
                    for where, secs, first in timings[before:]:
                        print(f"  {where}: {secs:5.1f} s  {first[:90]}", flush=True)
                ran = len(timings)
            except Failure as e:
                failures.append(str(e))
            finally:
                if args.keep:
                    print(f"docs check: scratch kept in {parent}")
                else:
                    shutil.rmtree(parent, ignore_errors=True)

    for line in failures:
        print(line)
    total = time.monotonic() - t_start
    print(f"docs check: {ran} blocks run, {checked} checked for names, {len(files)} files "
          f"({total:.1f} s)" + (f"; {len(failures)} failure(s)" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
