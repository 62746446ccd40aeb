#!/usr/bin/env python3
"""Writes llm.c token shards from a corpus: text, JSONL or Parquet, streamed.

Owns the shard format on the Python side (write_shard / read_shard, which the
other scripts import): a header of 256 little-endian int32 followed by the
tokens, in llm.c's two formats: magic 20240520, version 1 and uint16 tokens
(GPT-2), or magic 20240801, version 7 and uint32 tokens (Llama 3; written when
the vocabulary exceeds 65536). Header int 2 is the token count, int 3 the
tokenizer's vocabulary size (ours; llm.c leaves it 0), which the trainer
checks against model.vocab_size.

The pipeline, in bounded memory (a constant plus the largest document):
  read     documents one at a time, in sorted file order (data_sources.py:
           text files, JSONL lines, Parquet rows; .gz and .zst decompressed
           as streams)
  split    a document goes to val when a seeded hash of its index is under
           --val-fraction (a fraction of documents; none is ever cut)
  encode   batches of about 1 MB of text through --workers processes
           (data_tokenizers.py), each document becoming [separator] + its
           tokens (byte: NUL; GPT-2: <|endoftext|>; a tokenizer.json: its
           <|begin_of_text|> or <|endoftext|>), results taken in order, so the
           shards are the same for every --workers
  write    each split's shards stream to temporary files renamed when they
           hold --shard-tokens tokens; after each, prepare_state.json records
           where the next one starts, so a killed run leaves complete shards
           only and --resume continues to the same result
Progress (bytes, documents, tokens, MB/s, ETA: the shared line of scripts/progress.py) goes to stderr, a summary to
stdout. Shards from an earlier run that this run did not write are removed.

    python3 scripts/prepare_data.py                      # this repo's text, bytes
    python3 scripts/prepare_data.py --input corpus/ --out-dir data/corpus --workers 8
    python3 scripts/prepare_data.py --input 'fineweb/*.parquet' --tokenizer-json llama3/tokenizer.json
    python3 scripts/prepare_data.py --input docs.jsonl.zst --text-key content --resume
"""

import argparse
import array
import collections
import concurrent.futures
import fnmatch
import hashlib
import json
import multiprocessing
import os
import re
import struct
import sys
import threading
import time

# pyarrow imports numpy, whose OpenBLAS would start a thread per core (each
# with its stack) for the linear algebra this script never does.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_sources  # noqa: E402  (scripts/: the corpus's documents)
import data_tokenizers  # noqa: E402  (scripts/: the workers' tokenizers)
import progress as progress_line  # noqa: E402  (scripts/: the shared progress line)

MAGIC = 20240520      # uint16 tokens
VERSION = 1
MAGIC_U32 = 20240801  # uint32 tokens (llm.c's Llama 3 shards)
VERSION_U32 = 7
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4

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


# ---------------------------------------------------------------- the split

def goes_to_val(index, seed, val_fraction):
    """Whether document `index` is a val document: a seeded hash of its index
    under the fraction (streamable: no look at the other documents)."""
    if val_fraction <= 0:
        return False
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64 < val_fraction


# ---------------------------------------------------------------- shards

class ShardWriter:
    """One split's shards, written as tokens arrive: each shard streams into a
    temporary file (header first, its count filled in at the end) that is
    synced and renamed when it holds --shard-tokens tokens (or at the end), so
    memory stays constant and a killed run leaves only complete shards.

    Resume bookkeeping: after each shard, (doc, offset) is where the next
    shard starts: `offset` tokens of document `doc` are already in shards."""

    def __init__(self, out_dir, split, shard_tokens, width, vocab, on_commit):
        self.out_dir, self.split, self.shard_tokens = out_dir, split, shard_tokens
        self.width, self.vocab, self.on_commit = width, vocab, on_commit
        self.shards, self.tokens = 0, 0  # committed
        self.doc, self.offset = 0, 0     # where the next shard starts
        self.file, self.tmp, self.count = None, None, 0
        self.doc_now, self.done_now = 0, 0  # the document being written, its tokens written

    def path(self, i):
        return os.path.join(self.out_dir, f"{self.split}_{i:06d}.bin")

    def add(self, doc, data, count, skip=0):
        """Document `doc`'s tokens (count of them, `width` bytes each), the
        first `skip` of which are already in a shard (a resume)."""
        self.doc_now, self.done_now = doc, skip
        at = skip
        while at < count:
            if self.file is None:
                self._open()
            n = min(count - at, self.shard_tokens - self.count)
            self.file.write(data[at * self.width:(at + n) * self.width])
            self.count += n
            at += n
            self.done_now = at
            if self.count == self.shard_tokens:
                self._commit(doc, at)

    def finish(self):
        if self.file is not None and self.count > 0:
            self._commit(self.doc_now, self.done_now)
        elif self.file is not None:
            self._discard()

    def _open(self):
        self.tmp = f"{self.path(self.shards)}.tmp.{os.getpid()}"
        self.file = open(self.tmp, "wb")
        self.file.write(b"\0" * HEADER_BYTES)
        self.count = 0

    def _commit(self, doc, offset):
        wide = self.width == 4
        header = [0] * HEADER_INTS
        header[0], header[1] = (MAGIC_U32, VERSION_U32) if wide else (MAGIC, VERSION)
        header[2], header[3] = self.count, self.vocab
        self.file.seek(0)
        self.file.write(struct.pack(f"<{HEADER_INTS}i", *header))
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path(self.shards))
        self.file, self.tmp = None, None
        self.shards += 1
        self.tokens += self.count
        self.doc, self.offset = doc, offset
        self.on_commit(self)

    def _discard(self):
        self.file.close()
        os.remove(self.tmp)
        self.file, self.tmp = None, None

    def abandon(self):
        """A failed run: the shard in progress is removed, never renamed."""
        if self.file is not None:
            self._discard()

    def state(self):
        return {"shards": self.shards, "tokens": self.tokens, "doc": self.doc,
                "offset": self.offset}

    def restore(self, st):
        self.shards, self.tokens = st["shards"], st["tokens"]
        self.doc, self.offset = st["doc"], st["offset"]


# ---------------------------------------------------------------- progress

def _progress_fields(docs, tokens):
    """prepare_data's fields of the shared progress line (scripts/progress.py)."""
    return (f"{docs} docs", f"{tokens / 1e6:.2f}M tokens")


# ---------------------------------------------------------------- the run

STATE_FILE = "prepare_state.json"
BATCH_BYTES = 1 << 20  # documents per worker task: about this much text
BATCH_DOCS = 2048


def signature(paths, args, spec):
    """What the shards depend on: a resume must see the same."""
    files = []
    for p in paths:
        st = os.stat(p)
        files.append([p, st.st_size, int(st.st_mtime)])
    tok = list(spec)
    if spec[0] == "json":
        with open(spec[1], "rb") as f:
            tok.append(hashlib.sha256(f.read()).hexdigest())
    return {"files": files, "tokenizer": tok, "text_key": args.text_key,
            "val_fraction": args.val_fraction, "seed": args.seed,
            "shard_tokens": args.shard_tokens, "max_doc_bytes": args.max_doc_bytes,
            "bad_utf8": args.bad_utf8}


def batches(docs, stats, position, first_doc):
    """(index, data, where) batches of about BATCH_BYTES from document
    `first_doc` on; earlier documents are read and counted, not tokenized."""
    batch, size = [], 0
    for index, doc in enumerate(docs):
        stats["documents"] += 1
        stats["bytes"] += len(doc.data) if doc.data is not None else 0
        if index < first_doc:
            continue
        batch.append((index, doc.data, doc.where))
        size += len(doc.data) if doc.data is not None else 0
        if size >= BATCH_BYTES or len(batch) >= BATCH_DOCS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def prepare(paths, out_dir, args, spec, progress_stream=sys.stderr):
    """Streams the documents of `paths` through the tokenizer into shards;
    returns the summary dict."""
    name, vocab, sep = data_tokenizers.describe(spec)
    width = 4 if vocab > 65536 else 2
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):  # a killed run's unfinished shards
        if ".bin.tmp." in f:
            os.remove(os.path.join(out_dir, f))
    sig = signature(paths, args, spec)
    state_path = os.path.join(out_dir, STATE_FILE)
    old = None
    if args.resume and os.path.exists(state_path):
        with open(state_path) as f:
            old = json.load(f)
        if old.get("signature") != sig:
            diff = [k for k in sig if old.get("signature", {}).get(k) != sig[k]]
            raise PrepareError(f"--resume: {state_path} was written for other inputs or "
                               f"arguments (differs: {', '.join(diff)}); run without --resume")
    elif args.resume:
        print(f"prepare_data: --resume: no {state_path}, starting from the beginning",
              file=sys.stderr)
    elif os.path.exists(state_path):
        os.remove(state_path)

    stats = {"documents": 0, "bytes": 0, "skipped_utf8": 0, "nul_dropped": 0,
             "files_split": 0, "tokenized_bytes": 0}
    counters = {"train_docs": 0, "val_docs": 0}

    def save_state(complete=False):
        st = {"version": 1, "signature": sig, "complete": complete,
              "train": writers["train"].state(), "val": writers["val"].state(),
              "counters": dict(counters, skipped_utf8=stats["skipped_utf8"],
                               nul_dropped=stats["nul_dropped"])}
        write_atomic(state_path, [json.dumps(st, indent=1).encode()])

    writers = {s: ShardWriter(out_dir, s, args.shard_tokens, width, vocab,
                              lambda w: save_state()) for s in ("train", "val")}
    first_doc = 0
    if old is not None:
        if old.get("complete"):
            print(f"prepare_data: --resume: {out_dir} is complete already", file=sys.stderr)
            return summary_of(old, stats, name, vocab, sep, paths, 0.0, resumed=True)
        for s in ("train", "val"):
            writers[s].restore(old[s])
        first_doc = min(old["train"]["doc"], old["val"]["doc"])
        # The counters as of first_doc: the earlier writer's snapshot.
        snap = old["counters"]
        counters.update({k: snap[k] for k in counters})
        stats["skipped_utf8"], stats["nul_dropped"] = snap["skipped_utf8"], snap["nul_dropped"]
        print(f"prepare_data: --resume: {old['train']['shards']} train and "
              f"{old['val']['shards']} val shard(s) kept; tokenizing again from document "
              f"{first_doc}", file=sys.stderr)

    total_bytes = sum(os.path.getsize(p) for p in paths)
    position = {"bytes": 0}
    progress = progress_line.Progress("prepare_data", total_bytes, "MB", progress_stream)
    t0 = time.monotonic()
    docs = data_sources.documents(paths, args.text_key, args.max_doc_bytes, stats, position)

    def consume(results, wheres):
        for index, toks, count, nul, error in results:
            if error is not None:
                if args.bad_utf8 == "fail":
                    raise PrepareError(f"{wheres[index]}: {error} (--bad-utf8 skip to skip "
                                       "such documents)")
                stats["skipped_utf8"] += 1
                continue
            split = "val" if goes_to_val(index, args.seed, args.val_fraction) else "train"
            w = writers[split]
            if index < w.doc or (index == w.doc and w.offset >= count):
                continue  # in this split's shards already (a resume)
            stats["nul_dropped"] += nul
            counters[f"{split}_docs"] += 1
            w.add(index, toks, count, w.offset if index == w.doc else 0)
        progress.update(position["bytes"], _progress_fields(
            stats["documents"], writers["train"].tokens + writers["val"].tokens))

    pool = None
    try:
        if args.workers > 1:
            # The pool's helper thread needs little stack; the default (8 MiB)
            # would count against a memory limit for nothing. A worker that
            # dies (killed, out of memory) fails the run (BrokenProcessPool)
            # instead of leaving its batch waited on forever.
            threading.stack_size(1 << 20)
            pool = concurrent.futures.ProcessPoolExecutor(
                args.workers, mp_context=multiprocessing.get_context("fork"),
                initializer=data_tokenizers.init_worker, initargs=(spec, True))
        else:
            data_tokenizers.init_worker(spec)
        pending = collections.deque()
        for batch in batches(docs, stats, position, first_doc):
            wheres = {i: where for i, _, where in batch}
            payload = [(i, d) for i, d, _ in batch]
            stats["tokenized_bytes"] += sum(len(d) for _, d in payload if d is not None)
            if pool is None:
                consume(data_tokenizers.encode_batch(payload), wheres)
                continue
            # At most 2 batches per worker in flight: memory stays bounded
            # however far reading runs ahead of tokenizing.
            pending.append((pool.submit(data_tokenizers.encode_batch, payload),
                            wheres))
            while len(pending) >= 2 * args.workers:
                r, wh = pending.popleft()
                consume(r.result(), wh)
        while pending:
            r, wh = pending.popleft()
            consume(r.result(), wh)
        for w in writers.values():
            w.finish()
    except BaseException:
        for w in writers.values():
            w.abandon()
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    progress.update(position["bytes"], _progress_fields(
        stats["documents"], writers["train"].tokens + writers["val"].tokens), force=True)
    progress.close()
    elapsed = time.monotonic() - t0
    if writers["train"].tokens < 2:
        raise PrepareError(f"only {writers['train'].tokens} train token(s): need at least 2 "
                           "(more input, or a smaller --val-fraction)")
    if args.val_fraction > 0 and writers["val"].tokens < 2:
        raise PrepareError(f"--val-fraction {args.val_fraction} of {stats['documents']} "
                           f"document(s) sent {counters['val_docs']} to val "
                           f"({writers['val'].tokens} tokens): need at least 2 tokens "
                           "(more documents or a larger fraction)")
    save_state(complete=True)
    # Shards of an earlier, larger run would otherwise be picked up by globs.
    keep = {f"{s}_{i:06d}.bin" for s, w in writers.items() for i in range(w.shards)}
    for f in sorted(os.listdir(out_dir)):
        if SHARD_NAME.match(f) and f not in keep:
            os.remove(os.path.join(out_dir, f))
            print(f"removed stale {os.path.join(out_dir, f)}")
    with open(state_path) as f:
        done = json.load(f)
    return summary_of(done, stats, name, vocab, sep, paths, elapsed, resumed=old is not None)


def summary_of(state, stats, name, vocab, sep, paths, elapsed, resumed):
    c = state["counters"]
    return {
        "files": len(paths), "documents": stats["documents"], "bytes": stats["bytes"],
        "train_docs": c["train_docs"], "val_docs": c["val_docs"],
        "train_tokens": state["train"]["tokens"], "val_tokens": state["val"]["tokens"],
        "train_shards": state["train"]["shards"], "val_shards": state["val"]["shards"],
        "skipped_utf8": c["skipped_utf8"], "nul_dropped": c["nul_dropped"],
        "files_split": stats["files_split"], "tokenizer": name, "vocab": vocab,
        "separator": sep, "seconds": elapsed, "resumed": resumed,
        "tokenized_bytes": stats["tokenized_bytes"],
    }


def print_summary(s, out_dir, shard_tokens):
    docs = s["train_docs"] + s["val_docs"]
    tokens = s["train_tokens"] + s["val_tokens"]
    print(f"{s['files']} input file(s), {s['documents']} document(s), "
          f"{s['bytes'] / 1e6:.1f} MB of text; tokenizer {s['tokenizer']}, vocab {s['vocab']}, "
          f"{'uint32' if s['vocab'] > 65536 else 'uint16'} tokens, separator id "
          f"{s['separator']} before each document")
    print(f"train: {s['train_docs']} documents, {s['train_tokens']} tokens in "
          f"{s['train_shards']} shard(s); val: {s['val_docs']} documents, {s['val_tokens']} "
          f"tokens in {s['val_shards']} shard(s) (at most {shard_tokens} tokens each, in "
          f"{out_dir})")
    if docs:
        print(f"{tokens / docs:.1f} tokens per document")
    skipped = []
    if s["skipped_utf8"]:
        skipped.append(f"{s['skipped_utf8']} not valid UTF-8 (--bad-utf8 skip)")
    if s["nul_dropped"]:
        skipped.append(f"{s['nul_dropped']} NUL byte(s) dropped (the byte tokenizer's "
                       "separator)")
    if s["files_split"]:
        skipped.append(f"{s['files_split']} text file(s) over --max-doc-bytes split into "
                       "documents at line boundaries")
    for line in skipped:
        print(f"note: {line}")
    if s["seconds"] > 0:
        print(f"{s['tokenized_bytes'] / 1e6 / s['seconds']:.2f} MB/s of text tokenized "
              f"({s['seconds']:.1f} s{', resumed' if s['resumed'] else ''})")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Memory: a constant (the batches in flight: about 2 MB of text per worker) "
               "plus the largest document, whatever the corpus size.")
    ap.add_argument("--input", nargs="+", metavar="PATH",
                    help="files, directories or globs ('**' recurses): text (a document "
                         "per file), .jsonl/.json (a document per line), .parquet, each "
                         "optionally .gz or .zst; default: this repository's own text")
    ap.add_argument("--out-dir", default=None, help="default: <repo>/data/repo")
    ap.add_argument("--val-fraction", type=float, default=0.1,
                    help="the fraction of DOCUMENTS that go to val, chosen by a seeded hash "
                         "of each document's index (never cutting one; default 0.1)")
    ap.add_argument("--seed", type=int, default=0, help="the val split's hash seed")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000,
                    help="tokens per shard (default 100M, as llm.c)")
    ap.add_argument("--tokenizer", choices=("byte", "gpt2"), default="byte")
    ap.add_argument("--tokenizer-json", metavar="FILE",
                    help="a HF tokenizer.json (needs the tokenizers package); replaces "
                         "--tokenizer")
    ap.add_argument("--separator-token", metavar="TOKEN",
                    help="--tokenizer-json's document separator (default: its "
                         "<|begin_of_text|>, <|endoftext|>, <s>, ...)")
    ap.add_argument("--text-key", default="text",
                    help="the JSONL key / Parquet column holding the text (default: text)")
    ap.add_argument("--max-doc-bytes", type=int, default=64 << 20,
                    help="a text file larger than this is split at line boundaries "
                         "(default 64 MiB)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="tokenizing processes (default: the core count); the shards are "
                         "the same for every value")
    ap.add_argument("--bad-utf8", choices=("fail", "skip"), default="fail",
                    help="a document that is not valid UTF-8: fail (default) or skip and "
                         "count it")
    ap.add_argument("--resume", action="store_true",
                    help="continue a killed run from its last complete shard (same inputs "
                         "and arguments), to the same result as an uninterrupted run")
    args = ap.parse_args(argv)
    try:
        if not 0.0 <= args.val_fraction < 1.0:
            raise PrepareError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
        if args.shard_tokens < 2:
            raise PrepareError(f"--shard-tokens must be at least 2, got {args.shard_tokens}")
        if args.workers < 1:
            raise PrepareError(f"--workers must be at least 1, got {args.workers}")
        if args.max_doc_bytes < 1:
            raise PrepareError(f"--max-doc-bytes must be at least 1, got {args.max_doc_bytes}")
        spec = data_tokenizers.make_spec(args.tokenizer, args.tokenizer_json,
                                         args.separator_token)
        paths = data_sources.expand_inputs(args.input) if args.input else default_inputs()
        if not paths:
            raise PrepareError("no input files (check --input)")
        out_dir = args.out_dir or os.path.join(REPO_ROOT, "data", "repo")
        summary = prepare(paths, out_dir, args, spec)
    except (PrepareError, data_sources.SourceError, data_tokenizers.TokenizerError) as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    except concurrent.futures.process.BrokenProcessPool:
        print("prepare_data: error: a tokenizing worker died (out of memory or killed); "
              "the complete shards stay, --resume continues", file=sys.stderr)
        return 2
    except MemoryError:
        print("prepare_data: error: out of memory (a document larger than the memory "
              "available? see --max-doc-bytes); the complete shards stay, --resume continues",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prepare_data: interrupted: the complete shards stay; --resume continues",
              file=sys.stderr)
        return 130
    print_summary(summary, out_dir, args.shard_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
