#!/usr/bin/env python3
"""scripts/prepare_data.py's shard formats and its HF tokenizer.json path.

Both llm.c formats round-trip through write_shard / read_shard with their
headers as the trainer reads them (trainer/data/token_shard.hpp): uint16
(magic 20240520, version 1) while the vocabulary fits, uint32 (magic
20240801, version 7) past 65536 tokens, the tokenizer's vocabulary in header
int 3. The --tokenizer-json path runs when the `tokenizers` package is
installed (it skips otherwise): a word-level tokenizer of 70000 tokens built
here, so ids past 65535 land in uint32 shards.
Run directly or through ctest (prepare_data)."""

import array
import os
import struct
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import prepare_data  # noqa: E402  (standard library only)

SCRIPT = os.path.join(REPO, "scripts", "prepare_data.py")


def header(path):
    with open(path, "rb") as f:
        return struct.unpack("<4i", f.read(16))


class ShardFormats(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_prepare_")

    def test_uint16_while_the_vocabulary_fits(self):
        p = os.path.join(self.dir, "narrow.bin")
        prepare_data.write_shard(p, [0, 1, 65535, 7], vocab=65536)
        self.assertEqual(header(p), (20240520, 1, 4, 65536))
        self.assertEqual(os.path.getsize(p), 1024 + 2 * 4)
        self.assertEqual(list(prepare_data.read_shard(p)), [0, 1, 65535, 7])

    def test_uint32_past_65536(self):
        p = os.path.join(self.dir, "wide.bin")
        prepare_data.write_shard(p, [5, 128255, 70000], vocab=128256)
        self.assertEqual(header(p), (20240801, 7, 3, 128256))
        self.assertEqual(os.path.getsize(p), 1024 + 4 * 3)
        self.assertEqual(list(prepare_data.read_shard(p)), [5, 128255, 70000])
        # A token past uint16 widens the shard even with the vocabulary unknown.
        q = os.path.join(self.dir, "unrecorded.bin")
        prepare_data.write_shard(q, [1, 66000])
        self.assertEqual(header(q), (20240801, 7, 2, 0))

    def test_bad_headers_are_named(self):
        p = os.path.join(self.dir, "bad.bin")
        with open(p, "wb") as f:
            f.write(struct.pack("<256i", 20240801, 1, 0, *([0] * 253)))
        with self.assertRaisesRegex(prepare_data.PrepareError, "version 1, expected 7"):
            prepare_data.read_shard(p)


@unittest.skipUnless(
    subprocess.run([sys.executable, "-c", "import tokenizers"], capture_output=True).returncode == 0,
    "the tokenizers package is not installed")
class TokenizerJson(unittest.TestCase):
    def test_word_level_tokenizer_of_70000_tokens(self):
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from tokenizers.pre_tokenizers import Whitespace
        d = tempfile.mkdtemp(prefix="gt_tokjson_")
        vocab = {"[UNK]": 0, "<|endoftext|>": 1}
        vocab.update({f"w{i}": i for i in range(2, 69997)})
        vocab.update({"hello": 69997, "world": 69998, "again": 69999})
        tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = Whitespace()
        tok.add_special_tokens(["<|endoftext|>"])
        tj = os.path.join(d, "tokenizer.json")
        tok.save(tj)
        with open(os.path.join(d, "a.txt"), "w") as f:
            f.write("hello world again w5 hello " * 40)
        out = os.path.join(d, "shards")
        p = subprocess.run([sys.executable, SCRIPT, "--input", os.path.join(d, "a.txt"),
                            "--out-dir", out, "--tokenizer-json", tj, "--val-fraction", "0"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("vocab 70000, uint32 tokens, separator id 1", p.stdout)
        train = os.path.join(out, "train_000000.bin")
        self.assertEqual(header(train)[:2], (20240801, 7))
        self.assertEqual(header(train)[3], 70000)
        # The document separator first, then the document's tokens.
        self.assertEqual(list(prepare_data.read_shard(train))[:6],
                         [1, 69997, 69998, 69999, 5, 69997])

    def test_a_missing_tokenizer_file_is_one_error_line(self):
        d = tempfile.mkdtemp(prefix="gt_tokjson_")
        with open(os.path.join(d, "a.txt"), "w") as f:
            f.write("text")
        p = subprocess.run([sys.executable, SCRIPT, "--input", os.path.join(d, "a.txt"),
                            "--out-dir", d, "--tokenizer-json", os.path.join(d, "nope.json")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--tokenizer-json", p.stderr)
        self.assertIn("nope.json", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()
