#!/usr/bin/env python3
"""A trained run's folder opens with HF transformers.

Trains a tiny GPT-2 for 3 steps with build/trainer, then, under an
interpreter that has transformers and torch (this one or /usr/bin/python3,
Debian's python3-torch), loads log.dir with GPT2LMHeadModel.from_pretrained:
no missing or unexpected weights, the config.json dimensions the run's, every
weight equal to the exported safetensors, and the tied head tied.

The same for two tiny Llamas and a tiny Mixtral (MixtralForCausalLM) (configs/llama_tiny.yaml made small: grouped-
query attention, one with an untied head and plain RoPE, one tied with Llama
3.1's RoPE scaling) with LlamaForCausalLM.from_pretrained; then the trainer
evaluates the exported weights (a second run, model.init_from = the export,
its step-0 val_loss before any update) and transformers' loss on the same
validation rows must agree to VAL_LOSS_RTOL: the two forwards, ours and
HF's, on the same weights.

Skips (unittest skip, exit 0) when no interpreter has them.

    python3 tests/scripts/test_hf_export.py --build build
"""

import argparse
import json
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


# Ours and transformers' forward in fp32 on the same weights: a different
# summation order only (measured: ~1e-7).
VAL_LOSS_RTOL = 1e-5

CHECK_LLAMA = r"""
import json, sys
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
import transformers
spec = json.loads(sys.argv[1])
d = spec["run"]
cls = getattr(transformers, spec.get("hf_class", "LlamaForCausalLM"))
model, info = cls.from_pretrained(d, output_loading_info=True)
assert not info["missing_keys"], f"missing {info['missing_keys']}"
assert not info["unexpected_keys"], f"unexpected {info['unexpected_keys']}"
assert not info["mismatched_keys"], f"mismatched {info['mismatched_keys']}"
c, want = model.config, spec["model"]
got = dict(n_layer=c.num_hidden_layers, n_head=c.num_attention_heads,
           n_kv_head=c.num_key_value_heads, n_embd=c.hidden_size, ffn=c.intermediate_size,
           vocab_size=c.vocab_size, block_size=c.max_position_embeddings,
           tie=c.tie_word_embeddings, rope_theta=c.rope_theta,
           rope_scaling=getattr(c, "rope_scaling", None))
if "n_experts" in want:  # Mixtral: the mixture's keys, and transformers' loss the CE alone
    got.update(n_experts=c.num_local_experts, top_k=c.num_experts_per_tok)
    assert c.output_router_logits is False, c.output_router_logits
assert got == want, f"config.json: {got} != {want}"
tensors = load_file(d + "/model.safetensors")
sd = model.state_dict()
tied = want["tie"]
assert ("lm_head.weight" in tensors) != tied, sorted(tensors)
for name, t in tensors.items():
    assert torch.equal(sd[name], t), f"{name} differs"
assert set(tensors) | ({"lm_head.weight"} if tied else set()) == set(sd), set(sd) ^ set(tensors)
if tied:
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "head not tied"
x, y = torch.tensor(spec["inputs"]), torch.tensor(spec["targets"])
with torch.no_grad():
    logits = model(x).logits.float()
loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
ours = spec["val_loss"]
rel = abs(loss - ours) / abs(ours)
print(f"ok {len(tensors)} tensors; val loss ours {ours:.8f} transformers {loss:.8f} rel {rel:.1e}")
assert rel <= spec["rtol"], f"val loss: ours {ours} transformers {loss}: rel {rel} > {spec['rtol']}"
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


    def test_llama_run_folder_opens_with_from_pretrained(self):
        exe = os.path.join(BUILD, "trainer")
        self.assertTrue(os.path.exists(exe), f"{exe}: build first")
        sys.path.insert(0, os.path.join(REPO, "scripts"))
        import prepare_data  # noqa: E402
        T, rows, vocab = 16, 4, 256
        scaling = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8)
        cases = {  # name: (model.* overrides, HF's rope_scaling for them)
            "untied": ({"tie_embeddings": "false", "rope_scaling": "null"}, None),
            "tied_rope_scaling": (
                {"tie_embeddings": "true",
                 "rope_scaling": "{" + ", ".join(f"{k}: {v}" for k, v in scaling.items()) + "}"},
                dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position_embeddings=8)),
        }
        with tempfile.TemporaryDirectory(prefix="gt_hf_export_llama_") as d:
            train, val = os.path.join(d, "train.bin"), os.path.join(d, "val.bin")
            prepare_data.write_shard(train, [(i * 7) % vocab for i in range(4000)], vocab=vocab)
            val_tokens = [(i * i * 31 + 11 * i) % vocab for i in range(rows * T + 1)]
            prepare_data.write_shard(val, val_tokens, vocab=vocab)
            # configs/llama_tiny.yaml, smaller: 2 layers, 4 query heads over 2
            # key/value heads of 8 channels, MLP 96 (multiple_of 32's rule).
            common = [f"data.train={train}", "data.shuffle=false", "model.n_layer=2",
                      "model.n_head=4", "model.n_kv_head=2", "model.n_embd=32",
                      f"model.block_size={T}", f"train.seq_len={T}", "train.warmup_steps=1",
                      f"train.micro_batch={rows // 2}", f"train.global_batch={rows}",
                      "runtime.threads=1"]
            for name, (model_keys, hf_scaling) in cases.items():
                with self.subTest(name):
                    keys = common + [f"model.{k}={v}" for k, v in model_keys.items()]
                    run, evaluated = os.path.join(d, name), os.path.join(d, name + "_eval")
                    self.trainer(exe, keys + ["data.val=[]", "train.steps=3", "train.eval_every=0",
                                              f"log.dir={run}"])
                    # The exported weights' val loss in our forward: step 0's
                    # evaluation comes before any update.
                    self.trainer(exe, keys + [f"model.init_from={run}/model.safetensors",
                                              f"data.val={val}", "train.steps=1",
                                              "train.eval_every=1", "train.eval_batches=1",
                                              f"log.dir={evaluated}"])
                    with open(os.path.join(evaluated, "metrics.jsonl")) as f:
                        val_loss = next(r["val_loss"] for r in map(json.loads, f) if "val_loss" in r)
                    windows = [val_tokens[r * T:r * T + T + 1] for r in range(rows)]
                    spec = dict(run=run, val_loss=val_loss, rtol=VAL_LOSS_RTOL,
                                inputs=[w[:-1] for w in windows], targets=[w[1:] for w in windows],
                                model=dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn=96,
                                           vocab_size=vocab, block_size=T,
                                           tie=model_keys["tie_embeddings"] == "true",
                                           rope_theta=10000.0, rope_scaling=hf_scaling))
                    c = subprocess.run([PY, "-c", CHECK_LLAMA, json.dumps(spec)],
                                       capture_output=True, text=True)
                    self.assertEqual(c.returncode, 0, c.stdout[-2000:] + c.stderr[-3000:])
                    self.assertIn("ok", c.stdout)
                    print(f"{name}: {c.stdout.strip()}", file=sys.stderr)

    def test_mixtral_run_folder_opens_with_from_pretrained(self):
        exe = os.path.join(BUILD, "trainer")
        self.assertTrue(os.path.exists(exe), f"{exe}: build first")
        sys.path.insert(0, os.path.join(REPO, "scripts"))
        import prepare_data  # noqa: E402
        T, rows, vocab = 16, 4, 256
        with tempfile.TemporaryDirectory(prefix="gt_hf_export_mixtral_") as d:
            train, val = os.path.join(d, "train.bin"), os.path.join(d, "val.bin")
            prepare_data.write_shard(train, [(i * 7) % vocab for i in range(4000)], vocab=vocab)
            val_tokens = [(i * i * 31 + 11 * i) % vocab for i in range(rows * T + 1)]
            prepare_data.write_shard(val, val_tokens, vocab=vocab)
            # configs/mixtral_tiny.yaml, smaller: 2 layers, 4 experts of width
            # 48, 2 per token.
            keys = [f"data.train={train}", "data.shuffle=false", "model.n_layer=2",
                    "model.n_head=4", "model.n_kv_head=2", "model.n_embd=32",
                    "model.ffn_hidden=48", "model.n_experts=4", "model.experts_per_token=2",
                    f"model.block_size={T}", f"train.seq_len={T}", "train.warmup_steps=1",
                    f"train.micro_batch={rows // 2}", f"train.global_batch={rows}",
                    "runtime.threads=1"]
            run, evaluated = os.path.join(d, "run"), os.path.join(d, "eval")
            self.trainer(exe, keys + ["data.val=[]", "train.steps=3", "train.eval_every=0",
                                      f"log.dir={run}"], config="mixtral_tiny.yaml")
            self.trainer(exe, keys + [f"model.init_from={run}/model.safetensors",
                                      f"data.val={val}", "train.steps=1", "train.eval_every=1",
                                      "train.eval_batches=1", f"log.dir={evaluated}"],
                         config="mixtral_tiny.yaml")
            with open(os.path.join(evaluated, "metrics.jsonl")) as f:
                val_loss = next(r["val_loss"] for r in map(json.loads, f) if "val_loss" in r)
            windows = [val_tokens[r * T:r * T + T + 1] for r in range(rows)]
            spec = dict(run=run, val_loss=val_loss, rtol=VAL_LOSS_RTOL,
                        hf_class="MixtralForCausalLM",
                        inputs=[w[:-1] for w in windows], targets=[w[1:] for w in windows],
                        model=dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn=48,
                                   vocab_size=vocab, block_size=T, tie=False, rope_theta=10000.0,
                                   rope_scaling=None, n_experts=4, top_k=2))
            c = subprocess.run([PY, "-c", CHECK_LLAMA, json.dumps(spec)],
                               capture_output=True, text=True)
            self.assertEqual(c.returncode, 0, c.stdout[-2000:] + c.stderr[-3000:])
            self.assertIn("ok", c.stdout)
            print(f"mixtral: {c.stdout.strip()}", file=sys.stderr)

    def trainer(self, exe, overrides, config="llama_tiny.yaml"):
        p = subprocess.run([exe, "--config", os.path.join(REPO, "configs", config),
                            *overrides], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=BUILD)
    args, rest = ap.parse_known_args()
    BUILD = args.build
    unittest.main(argv=[sys.argv[0]] + rest)
