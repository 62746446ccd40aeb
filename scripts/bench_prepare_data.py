#!/usr/bin/env python3
"""Throughput of scripts/prepare_data.py: MB/s of input text for the byte
tokenizer and for a BPE tokenizer.json, at each --workers count, against a
single-process baseline of the same tokenizer measured in the same run (the
documents read and tokenized in one loop, nothing written).

The corpus is generated (tests/scripts/test_prepare_corpus.py's mix of
JSONL, Parquet and text files, compressed and not) unless --input names one;
the BPE tokenizer is trained here with the `tokenizers` library on the
corpus's first documents (nothing downloads). Each figure is the best of
--repeats runs.

    python3 scripts/bench_prepare_data.py                 # ~20 MB, workers 1 and 2
    python3 scripts/bench_prepare_data.py --mb 100 --workers 1 2 4
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "scripts"))
import data_sources  # noqa: E402
import data_tokenizers  # noqa: E402


def baseline(paths, spec):
    """Seconds to read and tokenize every document in this process."""
    data_tokenizers.init_worker(spec)
    t0 = time.perf_counter()
    batch, size = [], 0
    for i, doc in enumerate(data_sources.documents(paths, "text", 64 << 20, {}, {})):
        batch.append((i, doc.data))
        size += len(doc.data)
        if size >= 1 << 20:
            data_tokenizers.encode_batch(batch)
            batch, size = [], 0
    if batch:
        data_tokenizers.encode_batch(batch)
    return time.perf_counter() - t0


def prepare_seconds(corpus, out, workers, extra):
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.join(HERE, "prepare_data.py"), "--input", corpus,
                        "--out-dir", out, "--workers", str(workers), *extra],
                       capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"prepare_data failed:\n{p.stderr}")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", help="a corpus folder (default: generate one)")
    ap.add_argument("--mb", type=float, default=20, help="generated corpus size (MB of text)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gt_bench_prepare_")
    try:
        import test_prepare_corpus as corpus_gen
        corpus = args.input
        if not corpus:
            corpus = os.path.join(tmp, "corpus")
            docs = corpus_gen.make_corpus(corpus, int(args.mb * 1e6))
        else:
            docs = [d.data.decode("utf-8", "replace") for _, d in
                    zip(range(300), data_sources.documents(
                        data_sources.expand_inputs([corpus]), "text", 64 << 20, {}, {}))]
        paths = data_sources.expand_inputs([corpus])
        text_mb = sum(len(d.data) for d in
                      data_sources.documents(paths, "text", 64 << 20, {}, {})) / 1e6
        tj = os.path.join(tmp, "tokenizer.json")
        corpus_gen.train_bpe(tj, docs[:300], vocab=8192)
        print(f"corpus: {text_mb:.1f} MB of text in {len(paths)} files; {os.cpu_count()} cores")
        print(f"{'tokenizer':<22} {'run':<26} {'seconds':>8} {'MB/s':>8} {'vs baseline':>12}")
        for name, spec, extra in (("byte", ("byte",), []),
                                  ("BPE tokenizer.json 8k", ("json", tj, None),
                                   ["--tokenizer-json", tj])):
            base = min(baseline(paths, spec) for _ in range(args.repeats))
            print(f"{name:<22} {'baseline (one process)':<26} {base:8.2f} "
                  f"{text_mb / base:8.2f} {1.0:11.2f}x")
            for w in args.workers:
                out = os.path.join(tmp, f"out_{w}")
                secs = min(prepare_seconds(corpus, out, w, extra) for _ in range(args.repeats))
                print(f"{name:<22} {f'prepare_data --workers {w}':<26} {secs:8.2f} "
                      f"{text_mb / secs:8.2f} {base / secs:11.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
