#!/usr/bin/env python3
"""Writes llm.c token shards from text files.

Owns the shard format on the Python side (write_shard / read_shard, which the
other scripts import): a header of 256 little-endian int32 followed by the
tokens, in llm.c's two formats: magic 20240520, version 1 and uint16 tokens
(GPT-2), or magic 20240801, version 7 and uint32 tokens (Llama 3; written when
the vocabulary exceeds 65536). Header int 2 is the token count, int 3 the
tokenizer's vocabulary size (ours; llm.c leaves it 0), which the trainer
checks against model.vocab_size.

The input files are read in sorted order and joined with "\n\n"; the last
--val-fraction of the token stream becomes val, the rest train, each cut into
shards of at most --shard-tokens tokens. Every shard is written to a temporary
file and renamed, and shards from an earlier run that this run did not write
are removed, so running twice on the same input leaves the same files.

Pure standard library: no numpy, no torch.

    python3 scripts/prepare_data.py                      # this repo's text, bytes
    python3 scripts/prepare_data.py --input 'corpus/*.txt' --tokenizer gpt2
    python3 scripts/prepare_data.py --input 'corpus/*.txt' --tokenizer-json llama3/tokenizer.json
"""

import argparse
import array
import fnmatch
import glob
import os
import re
import struct
import sys

MAGIC = 20240520      # uint16 tokens
VERSION = 1
MAGIC_U32 = 20240801  # uint32 tokens (llm.c's Llama 3 shards)
VERSION_U32 = 7
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

def _u32_typecode():
    return "I" if array.array("I").itemsize == 4 else "L"


def write_atomic(path, chunks):
    """Writes the byte strings `chunks` to `path` through a temporary file
    renamed over it once synced: a reader never sees half a file, and a
    failure leaves no temporary behind."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_shard(path, tokens, vocab=0):
    """Writes `tokens` as an llm.c shard, atomically: uint16 when `vocab`
    (the tokenizer's size, recorded in header int 3; 0 = unknown) is at most
    65536 and every token fits, uint32 otherwise."""
    wide = vocab > 65536 or (len(tokens) > 0 and max(tokens) > 65535)
    code = _u32_typecode() if wide else "H"
    toks = tokens if isinstance(tokens, array.array) and tokens.typecode == code \
        else array.array(code, tokens)
    if sys.byteorder != "little":
        toks = array.array(code, toks)
        toks.byteswap()
    if len(toks) >= 2**31:
        raise PrepareError(f"{path}: {len(toks)} tokens do not fit the int32 header count")
    header = [0] * HEADER_INTS
    header[0], header[1] = (MAGIC_U32, VERSION_U32) if wide else (MAGIC, VERSION)
    header[2], header[3] = len(toks), vocab
    write_atomic(path, [struct.pack(f"<{HEADER_INTS}i", *header), toks.tobytes()])


def read_shard(path):
    """Returns the tokens of an llm.c shard as array('H') (uint16 shards) or a
    4-byte unsigned array (uint32 shards); validates the header."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_BYTES:
        raise PrepareError(f"{path}: {len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, count = struct.unpack_from("<3i", data, 0)
    if magic not in (MAGIC, MAGIC_U32):
        raise PrepareError(f"{path}: magic {magic}, expected {MAGIC} or {MAGIC_U32} "
                           "(not an llm.c token shard)")
    wide = magic == MAGIC_U32
    want_version = VERSION_U32 if wide else VERSION
    if version != want_version:
        raise PrepareError(f"{path}: version {version}, expected {want_version} with magic {magic}")
    width = 4 if wide else 2
    expected = HEADER_BYTES + width * count
    if count < 0 or len(data) != expected:
        raise PrepareError(f"{path}: header says {count} tokens ({expected} bytes), file has {len(data)} bytes")
    toks = array.array(_u32_typecode() if wide else "H")
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


def encode_tokenizer_json(texts, path):
    """A HF tokenizer.json (BPE and the rest) through the `tokenizers` package;
    no special tokens are added. Vocabulary: the tokenizer's, added tokens
    included (Llama 3: 128256)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PrepareError("--tokenizer-json needs the tokenizers package (pip install tokenizers)") \
            from None
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # a missing or malformed file surfaces as several types
        raise PrepareError(f"--tokenizer-json {path}: cannot load it ({type(e).__name__}: {e})") \
            from None
    vocab = tok.get_vocab_size(with_added_tokens=True)
    sep = tok.encode(SEPARATOR, add_special_tokens=False).ids
    tokens = array.array(_u32_typecode() if vocab > 65536 else "H")
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        if i:
            tokens.extend(sep)
        tokens.extend(enc.ids)
    return tokens, vocab


TOKENIZERS = {"byte": encode_bytes, "gpt2": encode_gpt2}


# ---------------------------------------------------------------- splitting

def split_train_val(tokens, val_fraction):
    """The LAST floor(n * val_fraction) tokens are val, the rest train."""
    n_val = int(len(tokens) * val_fraction)
    return tokens[:len(tokens) - n_val], tokens[len(tokens) - n_val:]


def chunks(tokens, shard_tokens):
    return [tokens[i:i + shard_tokens] for i in range(0, len(tokens), shard_tokens)]


def prepare(paths, out_dir, val_fraction, shard_tokens, tokenizer, tokenizer_json=None):
    """Tokenizes `paths` and writes the shards; returns [(path, tokens)], vocab."""
    if not paths:
        raise PrepareError("no input files (check --input)")
    texts = read_texts(paths)
    if tokenizer_json:
        tokens, vocab = encode_tokenizer_json(texts, tokenizer_json)
    else:
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
            write_shard(path, part, vocab)
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
    ap.add_argument("--tokenizer-json", metavar="FILE",
                    help="a HF tokenizer.json (needs the tokenizers package); replaces --tokenizer")
    args = ap.parse_args(argv)
    try:
        if not 0.0 <= args.val_fraction < 1.0:
            raise PrepareError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
        if args.shard_tokens < 2:
            raise PrepareError(f"--shard-tokens must be at least 2, got {args.shard_tokens}")
        paths = expand_inputs(args.input) if args.input else default_inputs()
        out_dir = args.out_dir or os.path.join(REPO_ROOT, "data", "repo")
        written, vocab, total = prepare(paths, out_dir, args.val_fraction,
                                        args.shard_tokens, args.tokenizer, args.tokenizer_json)
    except PrepareError as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    name = args.tokenizer_json or args.tokenizer
    print(f"{len(paths)} input file(s), {total} tokens, tokenizer {name}, vocab {vocab}, "
          f"{'uint32' if vocab > 65536 else 'uint16'} tokens")
    for path, n in written:
        print(f"wrote {path}: {n} tokens")
    n_train = sum(n for p, n in written if os.path.basename(p).startswith("train_"))
    print(f"train {n_train} tokens, val {total - n_train} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
