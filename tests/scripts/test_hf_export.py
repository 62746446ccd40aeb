#!/usr/bin/env python3
"""A trained run's folder opens with HF transformers.

Trains a tiny GPT-2 for 3 steps with build/trainer, then, under an
interpreter that has transformers and torch (this one or /usr/bin/python3,
Debian's python3-torch), loads log.dir with GPT2LMHeadModel.from_pretrained:
no missing or unexpected weights, the config.json dimensions the run's, every
weight equal to the exported safetensors, and the tied head tied. Skips
(unittest skip, exit 0) when no interpreter has them.

    python3 tests/scripts/test_hf_export.py --build build
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")

CHECK = r"""
import json, sys
import torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel
d = sys.argv[1]
model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
missing = [k for k in info["missing_keys"] if not k.endswith((".attn.bias", ".attn.masked_bias"))]
assert not missing, f"missing {missing}"
assert not info["unexpected_keys"], f"unexpected {info['unexpected_keys']}"
cfg = json.load(open(d + "/config.json"))
assert model.config.n_embd == cfg["n_embd"] == 32 and model.config.n_layer == 2
assert model.config.vocab_size == 256 and model.config.n_positions == 16
tensors = load_file(d + "/model.safetensors")
sd = model.transformer.state_dict()
for name, t in tensors.items():
    assert torch.equal(sd[name], t), f"{name} differs"
assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "head not tied"
out = model(torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]]))
assert torch.isfinite(out.loss), out.loss
print("ok", len(tensors), "tensors, loss", float(out.loss))
"""


def interpreter_with_transformers():
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import transformers, torch, safetensors"],
                capture_output=True).returncode == 0:
            return py
    return None


PY = interpreter_with_transformers()


@unittest.skipUnless(PY, "no interpreter here has transformers and torch")
class HfExport(unittest.TestCase):
    def test_gpt2_run_folder_opens_with_from_pretrained(self):
        exe = os.path.join(BUILD, "trainer")
        self.assertTrue(os.path.exists(exe), f"{exe}: build first")
        with tempfile.TemporaryDirectory(prefix="gt_hf_export_") as d:
            sys.path.insert(0, os.path.join(REPO, "scripts"))
            import prepare_data  # noqa: E402
            prepare_data.write_shard(os.path.join(d, "train.bin"),
                                     [(i * 7) % 256 for i in range(4000)], vocab=256)
            run = os.path.join(d, "run")
            p = subprocess.run([exe, "--config", os.path.join(REPO, "configs", "default.yaml"),
                                f"data.train={d}/train.bin", "data.val=[]", f"log.dir={run}",
                                "model.n_layer=2", "model.n_head=2", "model.n_embd=32",
                                "model.block_size=16", "train.seq_len=16", "train.steps=3",
                                "train.micro_batch=2", "train.global_batch=2",
                                "train.eval_every=0", "runtime.threads=1"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            c = subprocess.run([PY, "-c", CHECK, run], capture_output=True, text=True)
            self.assertEqual(c.returncode, 0, c.stdout[-2000:] + c.stderr[-3000:])
            self.assertIn("ok", c.stdout)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=BUILD)
    args, rest = ap.parse_known_args()
    BUILD = args.build
    unittest.main(argv=[sys.argv[0]] + rest)
