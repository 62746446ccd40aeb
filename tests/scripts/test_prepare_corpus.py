#!/usr/bin/env python3
"""scripts/prepare_data.py on a corpus generated here (about 20 MB of text as
JSONL, Parquet and text files, gzip- and zstd-compressed and not):

  * it prepares under a memory limit (RLIMIT_DATA: the libraries' floor on
    this machine plus 64 MiB) in which holding the corpus runs out of memory;
  * the shards decode back to the source documents, each after its
    separator, the val documents the ones the seeded hash picks;
  * --workers 1 and --workers 2 write the same bytes;
  * a run killed once it committed shards, then --resume, writes the same
    shards as an uninterrupted run;
  * a BPE tokenizer.json trained here (the tokenizers library, on local
    text: nothing downloads) round-trips too, and the trainer trains a few
    steps from both tokenizers' shards (--build);
  * bad input is one error line naming the file (and line): a JSONL line
    without the text key, an unreadable Parquet file, invalid UTF-8
    (--bad-utf8 fail; skip counts it), a tokenizer whose ids pass uint32.

Needs pyarrow, zstandard and tokenizers (WITH_PYPI=1 scripts/install_deps.sh,
which the test command runs); fails, not skips, without them.

    python3 tests/scripts/test_prepare_corpus.py --build build
"""

import argparse
import gzip
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")
sys.path.insert(0, SCRIPTS)
import prepare_data  # noqa: E402

SCRIPT = os.path.join(SCRIPTS, "prepare_data.py")
BUILD = None  # --build: the trainer for the training checks
# The bounded-memory run's RLIMIT_DATA: the libraries' own floor on this
# machine (pyarrow and numpy dominate it: 76 MiB with numpy 2.4) plus this
# much. Measured on the 20 MB corpus: prepare_data needs the floor + 41 MiB;
# holding the corpus and its byte tokens, the floor + well over 120 MiB.
HEADROOM = 64 << 20
_floor = []


def library_floor():
    """The least RLIMIT_DATA (bytes, to 2 MiB) in which this interpreter loads
    pyarrow.parquet and zstandard, found by bisection once."""
    if not _floor:
        lo, hi = 8, 512
        while hi - lo > 2:
            mid = (lo + hi) // 2
            lim = mid << 20
            # Just under its floor a library can spin retrying allocations
            # (OpenBLAS does): past the timeout counts as not loading.
            try:
                p = subprocess.run([sys.executable, "-c", "import pyarrow.parquet, zstandard"],
                                   capture_output=True, timeout=20,
                                   env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
                                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA,
                                                                         (lim, lim)))
                loaded = p.returncode == 0
            except subprocess.TimeoutExpired:
                loaded = False
            if loaded:
                hi = mid
            else:
                lo = mid
        _floor.append(hi << 20)
        print(f"libraries load in {hi} MiB; limit {hi + (HEADROOM >> 20)} MiB",
              file=sys.stderr)
    return _floor[0]

WORDS = ("the of and to in is was for on that with as by at from his it an were are which "
         "this be or has had not but also first one their its new after who they two her "
         "she been other when there all during into school time may years more most only "
         "over city some world would where later up such used many can state about national "
         "out known university united then made bande Straße naïve café 東京 смысл λόγος").split()


def make_document(rng):
    """A document of a few paragraphs (some long, some with unicode)."""
    paras = []
    for _ in range(rng.randint(1, 6)):
        n = rng.choice((5, 40, 200, 900))
        paras.append(" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + ".")
    return "\n\n".join(paras)


def make_corpus(root, target_bytes=20_000_000, seed=1):
    """Writes the corpus under root; returns the documents in prepare_data's
    order (sorted paths, then the order inside each file), as the byte
    tokenizer will see them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    rng = random.Random(seed)
    share = target_bytes // 7
    files = {}  # name -> list of documents

    def docs_of(nbytes):
        out, size = [], 0
        while size < nbytes:
            d = make_document(rng)
            out.append(d)
            size += len(d.encode())
        return out

    os.makedirs(os.path.join(root, "text"))
    for name, opener in (("a.jsonl", open), ("b.jsonl.gz", gzip.open)):
        docs = docs_of(share)
        with opener(os.path.join(root, name), "wt", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": len(d), "text": d}) + "\n")
        files[name] = docs
    docs = docs_of(share)
    raw = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    with open(os.path.join(root, "c.jsonl.zst"), "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(raw))
    files["c.jsonl.zst"] = docs
    for name in ("d.parquet", "e.parquet"):
        docs = docs_of(share)
        pq.write_table(pa.table({"text": docs, "n": list(range(len(docs)))}),
                       os.path.join(root, name), row_group_size=500)
        files[name] = docs
    # Text files: one document each; a few gzip'd; one with NUL bytes (the
    # byte tokenizer drops them).
    docs = docs_of(2 * share)
    for i, d in enumerate(docs):
        if i == 3:
            d = d[:50] + "\0" + d[50:]
            docs[i] = d
        name = os.path.join("text", f"t{i:05d}.txt" + (".gz" if i % 5 == 0 else ""))
        opener = gzip.open if name.endswith(".gz") else open
        with opener(os.path.join(root, name), "wb") as f:
            f.write(d.encode())
        files[name] = [d]
    ordered = []
    for name in sorted(files, key=lambda n: os.path.abspath(os.path.join(root, n))):
        ordered.extend(files[name])
    return ordered


def run(args, limit=None, **kw):
    def preexec():
        if limit:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          preexec_fn=preexec, timeout=240, **kw)


def shard_bytes(out):
    return {f: open(os.path.join(out, f), "rb").read()
            for f in sorted(os.listdir(out)) if f.endswith(".bin")}


def split_documents(tokens, sep):
    """Token lists of the documents in a shard stream, each after `sep`."""
    docs, cur = [], None
    for t in tokens:
        if t == sep:
            if cur is not None:
                docs.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur is not None:
        docs.append(cur)
    return docs


def read_split(out, split):
    toks = []
    for f in sorted(os.listdir(out)):
        if f.startswith(split + "_") and f.endswith(".bin"):
            toks.extend(prepare_data.read_shard(os.path.join(out, f)))
    return toks


def train_bpe(path, texts, vocab=600):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.save(path)
    return tok


class Corpus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gt_corpus_")
        cls.corpus = os.path.join(cls.tmp, "corpus")
        t0 = time.time()
        cls.docs = make_corpus(cls.corpus)
        cls.corpus_bytes = sum(len(d.encode()) for d in cls.docs)
        print(f"corpus: {len(cls.docs)} documents, {cls.corpus_bytes / 1e6:.1f} MB "
              f"({time.time() - t0:.1f} s)", file=sys.stderr)

    def out(self, name):
        return os.path.join(self.tmp, name)

    def prepare(self, name, *extra, limit=None):
        out = self.out(name)
        p = run(["--input", self.corpus, "--out-dir", out, "--shard-tokens", "3000000",
                 "--val-fraction", "0.05", *extra], limit=limit)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return out, p

    def test_bounded_memory_round_trip_and_workers(self):
        # The limit: what loading the libraries takes on this machine plus
        # HEADROOM, under what holding the corpus takes (the control below).
        limit = library_floor() + HEADROOM
        one, p1 = self.prepare("w1", "--workers", "1", limit=limit)
        two, _ = self.prepare("w2", "--workers", "2")
        self.assertEqual(shard_bytes(one), shard_bytes(two), "--workers 1 and 2 differ")
        self.assertIn("note: 1 NUL byte(s) dropped", p1.stdout)
        # Decoded: each split's documents in order, after their separators.
        want = {"train": [], "val": []}
        for i, d in enumerate(self.docs):
            split = "val" if prepare_data.goes_to_val(i, 0, 0.05) else "train"
            want[split].append(d.replace("\0", ""))
        self.assertTrue(want["val"], "no val document")
        for split in ("train", "val"):
            toks = read_split(one, split)
            self.assertEqual(toks[0], 0, f"{split} does not start with a separator")
            got = [bytes(t).decode() for t in split_documents(toks, 0)]
            self.assertEqual(len(got), len(want[split]), split)
            self.assertEqual(got, want[split], split)
        self.assertGreater(len(shard_bytes(one)), 4, "expected several shards")

    def test_holding_the_corpus_does_not_fit_the_limit(self):
        # The control: the same reader and libraries, holding every document
        # and the byte tokens (what the whole-corpus script did), under the
        # same limit, runs out of memory.
        code = ("import array, sys; sys.path.insert(0, %r); import pyarrow.parquet, "
                "zstandard, data_sources; paths = data_sources.expand_inputs([%r]); "
                "docs = [d.data for d in data_sources.documents(paths, 'text', 1 << 26, {}, "
                "{})]; text = b''.join(docs); toks = array.array('H', bytes(2 * len(text)))"
                % (SCRIPTS, self.corpus))

        limit = library_floor() + HEADROOM

        def preexec():
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               preexec_fn=preexec, timeout=60,
                               env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        except subprocess.TimeoutExpired:
            return  # stuck retrying allocations at the limit: it did not fit either
        self.assertNotEqual(p.returncode, 0, "holding the corpus fit the limit: raise the "
                            "corpus or lower HEADROOM")
        self.assertIn("MemoryError", p.stderr)

    def test_kill_then_resume_gives_the_same_shards(self):
        whole, _ = self.prepare("whole", "--workers", "1", "--shard-tokens", "1000000")
        out = self.out("killed")
        proc = subprocess.Popen([sys.executable, SCRIPT, "--input", self.corpus, "--out-dir", out,
                                 "--shard-tokens", "1000000", "--val-fraction", "0.05",
                                 "--workers", "1"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        state = os.path.join(out, "prepare_state.json")
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if json.load(open(state))["train"]["shards"] >= 3:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        st = json.load(open(state))
        self.assertFalse(st["complete"], "the run finished before it was killed")
        kept = {f for f in os.listdir(out) if f.endswith(".bin")}
        self.assertFalse([f for f in os.listdir(out) if ".tmp." in f and f in kept])
        _, p = self.prepare("killed", "--workers", "2", "--shard-tokens", "1000000", "--resume")
        self.assertIn("--resume:", p.stderr)
        self.assertEqual(shard_bytes(whole), shard_bytes(out), "resumed shards differ")
        self.assertFalse([f for f in os.listdir(out) if ".tmp." in f])

    def test_bpe_tokenizer_json_round_trip(self):
        tj = os.path.join(self.tmp, "tokenizer.json")
        tok = train_bpe(tj, self.docs[:300])
        out, p = self.prepare("bpe", "--tokenizer-json", tj, "--workers", "2")
        sep = tok.token_to_id("<|endoftext|>")
        self.assertIn(f"separator id {sep}", p.stdout)
        train = read_split(out, "train")
        got = split_documents(train, sep)
        want = [d.replace("\0", "\ufffd") for i, d in enumerate(self.docs)
                if not prepare_data.goes_to_val(i, 0, 0.05)]
        self.assertEqual(len(got), len(want))
        for i in (0, 1, len(got) // 2, len(got) - 1):
            self.assertEqual(tok.decode(got[i]), want[i].replace("\ufffd", "\0"))

    def test_the_trainer_trains_from_both_tokenizers(self):
        if not BUILD:
            self.skipTest("--build not given: the trainer is not run")
        tj = os.path.join(self.tmp, "tokenizer_small.json")
        tok = train_bpe(tj, self.docs[:200], vocab=512)
        for name, extra, vocab in (("byte", [], 256),
                                   ("bpe2", ["--tokenizer-json", tj], tok.get_vocab_size())):
            out, _ = self.prepare(f"train_{name}", *extra)
            run_dir = self.out(f"run_{name}")
            cfg = os.path.join(self.tmp, f"{name}.yaml")
            with open(cfg, "w") as f:
                f.write(f"""model:
  n_layer: 2
  n_head: 2
  n_embd: 32
  vocab_size: {vocab}
  block_size: 64
data:
  train: ["{out}/train_*.bin"]
  val: ["{out}/val_*.bin"]
train:
  seq_len: 64
  micro_batch: 4
  global_batch: 4
  steps: 5
  eval_every: 5
  eval_batches: 1
runtime:
  device: cpu
log:
  dir: {run_dir}
checkpoint:
  every: 0
""")
            p = subprocess.run([os.path.join(BUILD, "trainer"), "--config", cfg],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
            self.assertEqual(len(recs), 5)
            self.assertLess(recs[-1]["loss"], recs[0]["loss"], name)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_badcorpus_")

    def one_error(self, args, *needles):
        p = run([*args, "--out-dir", os.path.join(self.dir, "out")])
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for n in needles:
            self.assertIn(n, lines[0])
        self.assertNotIn("Traceback", p.stderr)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_a_jsonl_line_without_the_key(self):
        path = self.write("x.jsonl", b'{"text": "fine"}\n{"body": "no text here"}\n')
        self.one_error(["--input", path], "x.jsonl:2", "'text'", "body")

    def test_an_unreadable_parquet_file(self):
        path = self.write("y.parquet", b"PAR1 this is not parquet at all")
        self.one_error(["--input", path], "y.parquet", "unreadable Parquet")

    def test_invalid_utf8_fails_or_is_skipped(self):
        good = b"".join(b"a fine document number %d\n" % i for i in range(50))
        paths = [self.write(f"d{i}.txt", good) for i in range(20)]
        bad = self.write("zz_bad.txt", b"caf\xe9 latin-1")
        self.one_error(["--input", *paths, bad], "zz_bad.txt", "invalid UTF-8", "--bad-utf8")
        p = run(["--input", *paths, bad, "--out-dir", os.path.join(self.dir, "out"),
                 "--bad-utf8", "skip", "--val-fraction", "0.2"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("note: 1 not valid UTF-8 (--bad-utf8 skip)", p.stdout)

    def test_a_text_file_over_max_doc_bytes_is_split_whole_characters(self):
        # Long lines of 3-byte characters: every cut lands inside a line.
        text = "".join(f"line {i} " + "東京" * 300 + "\n" for i in range(30))
        path = self.write("long.txt", text.encode())
        out = os.path.join(self.dir, "out")
        p = run(["--input", path, "--out-dir", out, "--max-doc-bytes", "1000",
                 "--val-fraction", "0"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("note: 1 text file(s) over --max-doc-bytes split", p.stdout)
        docs = [bytes(t).decode() for t in split_documents(read_split(out, "train"), 0)]
        self.assertGreater(len(docs), 20)
        self.assertTrue(all(len(d.encode()) <= 1000 for d in docs))
        self.assertEqual("".join(docs), text)

    def test_a_tokenizer_past_uint32(self):
        import data_tokenizers
        import tokenizers

        class Huge:
            def get_vocab_size(self, with_added_tokens=True):
                return 2**32 + 5

        real = tokenizers.Tokenizer.from_file
        tokenizers.Tokenizer.from_file = staticmethod(lambda path: Huge())
        try:
            with self.assertRaisesRegex(data_tokenizers.TokenizerError, "uint32 shard format"):
                data_tokenizers.load(("json", "huge.json", None))
        finally:
            tokenizers.Tokenizer.from_file = real


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", help="a build folder: the trainer trains from the shards")
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build) if args.build else None
    unittest.main(argv=[sys.argv[0], *rest])
