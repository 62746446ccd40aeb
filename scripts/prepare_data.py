#!/usr/bin/env python3
"""Writes llm.c token shards from text files.

Owns the shard format on the Python side (write_shard / read_shard, which the
other scripts import): a header of 256 little-endian int32 (magic 20240520,
version 1, token count, zeros) followed by the tokens as little-endian uint16.

The input files are read in sorted order and joined with "\n\n"; the last
--val-fraction of the token stream becomes val, the rest train, each cut into
shards of at most --shard-tokens tokens. Every shard is written to a temporary
file and renamed, and shards from an earlier run that this run did not write
are removed, so running twice on the same input leaves the same files.

Pure standard library: no numpy, no torch.

    python3 scripts/prepare_data.py                      # this repo's text, bytes
    python3 scripts/prepare_data.py --input 'corpus/*.txt' --tokenizer gpt2
"""

import argparse
import array
import fnmatch
import glob
import os
import re
import struct
import sys

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
SEPARATOR = "\n\n"

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The repository's own text: patterns relative to the repo root ("**/" = any
# number of directories, including none).
DEFAULT_PATTERNS = [
    "README.md", "docs/**/*.md", "**/*.cpp", "**/*.hpp", "**/*.cu", "**/*.cuh",
    "**/*.py", "**/*.yaml", "CMakeLists.txt",
]
# Directory names pruned from the walk: build outputs, runs and data at the
# top level (as .gitignore has them), VCS and caches anywhere.
EXCLUDED_TOP_DIRS = ("build*", "runs", "data")
EXCLUDED_ANY_DIRS = (".git", "__pycache__")

SHARD_NAME = re.compile(r"^(train|val)_\d{6}\.bin$")


class PrepareError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


# ---------------------------------------------------------------- shard format

def write_shard(path, tokens):
    """Writes `tokens` (ints in [0, 65535]) as an llm.c shard, atomically."""
    toks = tokens if isinstance(tokens, array.array) and tokens.typecode == "H" \
        else array.array("H", tokens)
    if sys.byteorder != "little":
        toks = array.array("H", toks)
        toks.byteswap()
    if len(toks) >= 2**31:
        raise PrepareError(f"{path}: {len(toks)} tokens do not fit the int32 header count")
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, VERSION, len(toks)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack(f"<{HEADER_INTS}i", *header))
            f.write(toks.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_shard(path):
    """Returns the tokens of an llm.c shard as array('H'); validates the header."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_BYTES:
        raise PrepareError(f"{path}: {len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, count = struct.unpack_from("<3i", data, 0)
    if magic != MAGIC:
        raise PrepareError(f"{path}: magic {magic}, expected {MAGIC} (not an llm.c token shard)")
    if version != VERSION:
        raise PrepareError(f"{path}: version {version}, expected {VERSION} (uint16 tokens)")
    expected = HEADER_BYTES + 2 * count
    if count < 0 or len(data) != expected:
        raise PrepareError(f"{path}: header says {count} tokens ({expected} bytes), file has {len(data)} bytes")
    toks = array.array("H")
    toks.frombytes(data[HEADER_BYTES:])
    if sys.byteorder != "little":
        toks.byteswap()
    return toks


# ---------------------------------------------------------------- inputs

def _pattern_regex(pattern):
    """Glob pattern (relative, '/'-separated) -> regex; '**/' spans directories."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("^" + "".join(out) + "$")


def default_inputs(root=REPO_ROOT):
    """The repository's own text files, sorted by path relative to `root`."""
    regexes = [_pattern_regex(p) for p in DEFAULT_PATTERNS]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        top = rel_dir == "."
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in EXCLUDED_ANY_DIRS
            and not (top and any(fnmatch.fnmatch(d, p) for p in EXCLUDED_TOP_DIRS)))
        for name in filenames:
            rel = name if top else f"{rel_dir}/{name}".replace(os.sep, "/")
            if any(r.match(rel) for r in regexes):
                found.append(rel)
    return [os.path.join(root, rel) for rel in sorted(found)]


def expand_inputs(patterns):
    """Files and globs (relative to the working directory) -> sorted unique files."""
    files = set()
    for pattern in patterns:
        matches = [m for m in glob.glob(pattern, recursive=True) if os.path.isfile(m)]
        if not matches:
            raise PrepareError(f"--input {pattern!r} matches no file")
        files.update(os.path.abspath(m) for m in matches)
    return sorted(files)


def read_texts(paths):
    texts = []
    for p in paths:
        with open(p, "rb") as f:
            texts.append(f.read().decode("utf-8", errors="replace"))
    return texts


# ---------------------------------------------------------------- tokenizers

def encode_bytes(texts):
    """UTF-8 bytes of the files joined with SEPARATOR; vocab 256."""
    data = SEPARATOR.join(texts).encode("utf-8")
    # Widen bytes to uint16 without a Python loop: low byte = the byte.
    wide = bytearray(2 * len(data))
    wide[0 if sys.byteorder == "little" else 1::2] = data
    tokens = array.array("H")
    tokens.frombytes(bytes(wide))
    return tokens, 256


def encode_gpt2(texts):
    """GPT-2 BPE through tiktoken, which must be installed and have its files cached."""
    hint = ("--tokenizer gpt2 needs tiktoken with the gpt2 encoding cached "
            "(pip install tiktoken, then load tiktoken.get_encoding('gpt2') once online, "
            "or point TIKTOKEN_CACHE_DIR at a cache); use --tokenizer byte otherwise")
    try:
        import tiktoken
    except ImportError:
        raise PrepareError(f"tiktoken is not installed: {hint}") from None
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # network or cache failures surface as many types
        raise PrepareError(f"could not load the gpt2 encoding ({type(e).__name__}: {e}): {hint}") from None
    if enc.n_vocab > 65536:
        raise PrepareError(f"gpt2 vocab {enc.n_vocab} does not fit uint16 tokens")
    sep = enc.encode_ordinary(SEPARATOR)
    tokens = array.array("H")
    for i, t in enumerate(texts):
        if i:
            tokens.extend(sep)
        tokens.extend(enc.encode_ordinary(t))
    return tokens, enc.n_vocab


TOKENIZERS = {"byte": encode_bytes, "gpt2": encode_gpt2}


# ---------------------------------------------------------------- splitting

def split_train_val(tokens, val_fraction):
    """The LAST floor(n * val_fraction) tokens are val, the rest train."""
    n_val = int(len(tokens) * val_fraction)
    return tokens[:len(tokens) - n_val], tokens[len(tokens) - n_val:]


def chunks(tokens, shard_tokens):
    return [tokens[i:i + shard_tokens] for i in range(0, len(tokens), shard_tokens)]


def prepare(paths, out_dir, val_fraction, shard_tokens, tokenizer):
    """Tokenizes `paths` and writes the shards; returns [(path, tokens)], vocab."""
    if not paths:
        raise PrepareError("no input files (check --input)")
    texts = read_texts(paths)
    tokens, vocab = TOKENIZERS[tokenizer](texts)
    if len(tokens) == 0:
        raise PrepareError(f"the {len(paths)} input file(s) are empty: nothing to write")
    train, val = split_train_val(tokens, val_fraction)
    # A shard of fewer than 2 tokens offers no (input, target) pair at all.
    if len(train) < 2:
        raise PrepareError(f"only {len(train)} train token(s) after the val split: need at least 2")
    if val_fraction > 0 and len(val) < 2:
        raise PrepareError(f"--val-fraction {val_fraction} of {len(tokens)} tokens leaves "
                           f"{len(val)} val token(s): need at least 2 (more input or a larger fraction)")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for split, toks in (("train", train), ("val", val)):
        for i, part in enumerate(chunks(toks, shard_tokens)):
            path = os.path.join(out_dir, f"{split}_{i:06d}.bin")
            write_shard(path, part)
            written.append((path, len(part)))
    # Shards of an earlier, larger run would otherwise be picked up by globs.
    keep = {os.path.basename(p) for p, _ in written}
    for name in sorted(os.listdir(out_dir)):
        if SHARD_NAME.match(name) and name not in keep:
            os.remove(os.path.join(out_dir, name))
            print(f"removed stale {os.path.join(out_dir, name)}")
    return written, vocab, len(tokens)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", nargs="+", metavar="FILE_OR_GLOB",
                    help="files or globs ('**' recurses); default: this repository's own text")
    ap.add_argument("--out-dir", default=None, help="default: <repo>/data/repo")
    ap.add_argument("--val-fraction", type=float, default=0.1,
                    help="last fraction of the token stream that goes to val (default 0.1)")
    ap.add_argument("--shard-tokens", type=int, default=10_000_000)
    ap.add_argument("--tokenizer", choices=sorted(TOKENIZERS), default="byte")
    args = ap.parse_args(argv)
    try:
        if not 0.0 <= args.val_fraction < 1.0:
            raise PrepareError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
        if args.shard_tokens < 2:
            raise PrepareError(f"--shard-tokens must be at least 2, got {args.shard_tokens}")
        paths = expand_inputs(args.input) if args.input else default_inputs()
        out_dir = args.out_dir or os.path.join(REPO_ROOT, "data", "repo")
        written, vocab, total = prepare(paths, out_dir, args.val_fraction,
                                        args.shard_tokens, args.tokenizer)
    except PrepareError as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    print(f"{len(paths)} input file(s), {total} tokens, tokenizer {args.tokenizer}, vocab {vocab}")
    for path, n in written:
        print(f"wrote {path}: {n} tokens")
    n_train = sum(n for p, n in written if os.path.basename(p).startswith("train_"))
    print(f"train {n_train} tokens, val {total - n_train} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
