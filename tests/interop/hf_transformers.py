#!/usr/bin/env python3
"""ctitan <-> Hugging Face transformers, checked by transformers itself (`make test-interop`).

Needs `torch` and `transformers` (and uses `numpy`); when one does not import, prints one SKIP
line and exits 0, so machines without them pass. Not part of `make test`, which needs no Python.

What it checks, on small models trained for a few steps by `ctitan train`:
  1. `ctitan convert --to hf` output loads with LlamaForCausalLM.from_pretrained, and its loss on
     a window of tokens equals `ctitan eval`'s on the same window (fp32: 1e-5 relative), with
     Llama 3.1 RoPE scaling and with plain RoPE; reading the q/k rows without the permutation
     gives another loss (the check can see a layout error; shown with plain RoPE at theta 10000).
  2. A bf16 export gives the loss of ctitan's bf16 model (computed in fp32 by both).
  3. AutoTokenizer on the exported tokenizer encodes texts as `ctitan tokenizer encode` does.
  Loading an export (fp32 and bf16 models, the tokenizer) warns nothing at all: every WARNING of
  transformers' loggers and every Python warning raised meanwhile fails the check, listed.
  4. Directories written by transformers' save_pretrained -- sharded, bf16, tied embeddings --
     read by `ctitan convert --from hf` give transformers' loss under `ctitan eval`.
  5. Qwen3-MoE: a llama3_moe model trained here loads with Qwen3MoeForCausalLM without a warning
     and gives `ctitan eval`'s loss; reading its q/k norm weights in ctitan's order gives another
     loss; a Qwen3MoeForCausalLM save_pretrained directory read by `ctitan convert --from hf`
     gives transformers' loss.
Prints PASS/FAIL lines and "N passed, N failed"; exits 1 when anything failed.
"""
import argparse
import logging
import os
import struct
import subprocess
import sys
import tempfile
import warnings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "ctitan"))
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP hf_transformers: {e.name} does not import (pip install torch transformers numpy)")
        return 0
    if not os.access(args.bin, os.X_OK):
        print(f"FAIL hf_transformers: no ctitan binary at {args.bin} (make first)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        return Checks(args.bin, tmp).run()


class LoadLog(logging.Handler):
    """What transformers warns while a block runs: its loggers' WARNING lines (they all go
    through the "transformers" logger, here at WARNING level whatever TRANSFORMERS_VERBOSITY
    says) and Python warnings of any category."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []
        self._caught = None

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")

    def __enter__(self):
        from transformers.utils import logging as hf_logging

        self._level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_warning()
        logging.getLogger("transformers").addHandler(self)
        self._caught = warnings.catch_warnings(record=True)
        self._records = self._caught.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        from transformers.utils import logging as hf_logging

        self._caught.__exit__(*exc)
        logging.getLogger("transformers").removeHandler(self)
        hf_logging.set_verbosity(self._level)
        self.lines += [f"{w.category.__name__}: {w.message}" for w in self._records]
        return False


class Checks:
    T = 32  # tokens per window

    def __init__(self, binary, tmp):
        import torch
        import transformers

        self.bin, self.tmp = binary, tmp
        self.passed = self.failed = 0
        # from_pretrained's fp32 argument: `dtype` since transformers 4.56, which warns about the
        # older `torch_dtype` (a warning of the test's own making, not of the export).
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        self.fp32 = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": torch.float32}

    def ctitan(self, *argv):
        r = subprocess.run([self.bin, *argv], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ctitan {' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
        return r.stdout

    def check(self, name, ok, detail=""):
        print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    # ---- data --------------------------------------------------------------------------------
    def shard(self, tokens, vocab, name):
        """One ctitan val shard holding exactly one window of T + 1 tokens (docs/data_format.md)."""
        d = self.path(name)
        os.makedirs(d, exist_ok=True)
        width = 2 if vocab <= 65536 else 4
        with open(os.path.join(d, "val_000.bin"), "wb") as f:
            f.write(b"CTTOKENS" + struct.pack("<IIQI", 1, width, len(tokens), vocab) + bytes(36))
            f.write(b"".join(int(t).to_bytes(width, "little") for t in tokens))
        return d

    def ctitan_loss(self, model_file, data):
        out = self.ctitan("eval", "--model", model_file, "--data", data, "--split", "val", "--seq_len", str(self.T))
        return float(next(l.split()[1] for l in out.splitlines() if l.startswith("loss ")))

    def hf_loss(self, model, tokens):
        import torch

        x = torch.tensor([tokens[: self.T]])
        y = torch.tensor(tokens[1:])
        with torch.no_grad():
            logits = model(input_ids=x).logits[0].float()
        return torch.nn.functional.cross_entropy(logits, y).item()

    # ---- 1-3: ctitan -> HF ---------------------------------------------------------------------
    def train(self, name, vocab, extra):
        out = self.path(name)
        self.ctitan("train", "--model.dim", "64", "--model.n_layers", "2", "--model.n_heads", "4",
                    "--model.n_kv_heads", "2", "--model.vocab_size", str(vocab), "--model.ffn_hidden_dim", "96",
                    "--training.seq_len", str(self.T), "--training.dataset", "synthetic",
                    "--metrics.peak_tflops", "1", "--micro_batch_size", "2", "--training.steps", "30",
                    "--optimizer.lr", "3e-3", "--lr_scheduler.warmup_steps", "2", "--job.dump_folder", out, *extra)
        return os.path.join(out, "model.safetensors")

    def export_checks(self, label, model_file, tokenizer, vocab, rng, check_rows):
        import torch
        from transformers import LlamaForCausalLM

        tokens = [int(t) for t in rng.integers(0, vocab, self.T + 1)]
        data = self.shard(tokens, vocab, f"data_{label}")
        hf = self.path(f"hf_{label}")
        self.ctitan("convert", "--to", "hf", "--model", model_file, "--out", hf, "--tokenizer", tokenizer)
        want = self.ctitan_loss(model_file, data)
        with LoadLog() as log:
            model = LlamaForCausalLM.from_pretrained(hf, **self.fp32)
        self.check(f"{label}_fp32_export_loads_without_warning", not log.lines, " | ".join(log.lines))
        got = self.hf_loss(model, tokens)
        self.check(f"{label}_fp32_loss_matches_ctitan_eval", abs(got - want) <= 1e-5 * abs(want),
                   f"transformers {got:.7f}, ctitan {want:.7f}")
        if check_rows:
            self.unpermuted_check(label, model, tokens, want)

        hf16 = self.path(f"hf16_{label}")
        back16 = self.path(f"back16_{label}.safetensors")
        self.ctitan("convert", "--to", "hf", "--model", model_file, "--out", hf16, "--dtype", "bf16")
        self.ctitan("convert", "--from", "hf", "--model", hf16, "--out", back16)
        want16 = self.ctitan_loss(back16, data)
        with LoadLog() as log:
            model16 = LlamaForCausalLM.from_pretrained(hf16, **self.fp32)
        self.check(f"{label}_bf16_export_loads_without_warning", not log.lines, " | ".join(log.lines))
        got16 = self.hf_loss(model16, tokens)
        self.check(f"{label}_bf16_loss_matches_ctitan_eval", abs(got16 - want16) <= 1e-5 * abs(want16),
                   f"transformers {got16:.7f}, ctitan {want16:.7f}")
        return hf

    def unpermuted_check(self, label, model, tokens, want):
        """The same weights with the q/k rows in Meta's order (no permutation) compute another
        function, so the loss check above can see a layout error. Only where RoPE turns far
        within T tokens (rope_theta 10000): at 500000 the slow pairs hardly move in 32 positions."""
        import torch

        hd = model.config.hidden_size // model.config.num_attention_heads
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                    w = proj.weight
                    n = w.shape[0] // hd  # HF row h·hd + j·hd/2 + i back to h·hd + 2i + j
                    w.copy_(w.view(n, 2, hd // 2, -1).transpose(1, 2).reshape(w.shape))
        wrong = self.hf_loss(model, tokens)
        self.check(f"{label}_unpermuted_rows_change_the_loss", abs(wrong - want) > 1e-4 * abs(want),
                   f"unpermuted {wrong:.7f} vs {want:.7f}")

    def tokenizer_checks(self, hf, tokenizer):
        try:
            from transformers import AutoTokenizer

            with LoadLog() as log:
                tok = AutoTokenizer.from_pretrained(hf)
        except Exception as e:  # tokenizers missing or too old for ignore_merges
            self.check("tokenizer_loads", False, repr(e))
            return
        self.check("tokenizer_loads_without_warning", not log.lines, " | ".join(log.lines))
        texts = ["Hello world, this is a test.", "Numbers 12345 and  double  spaces\n\nnew lines",
                 "Caf\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e \U0001F600", "don't won't they'll I'm"]
        for i, text in enumerate(texts):
            want = [int(t) for t in self.ctitan("tokenizer", "encode", "--tokenizer", tokenizer, "--text", text).split()]
            got = tok(text)["input_ids"]
            self.check(f"tokenizer_encodes_like_ctitan_{i}", got == want, f"{got} vs {want}")
            self.check(f"tokenizer_decodes_{i}", tok.decode(got) == text, tok.decode(got))

    # ---- 4: HF -> ctitan -----------------------------------------------------------------------
    def import_checks(self, rng):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        # The contexts of Llama 3.1 (131072, scaled from 8192) and Llama 3 (8192).
        cases = [
            ("sharded_fp32_llama31", torch.float32, False,
             {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}, 500000.0, 131072),
            ("sharded_bf16_tied", torch.bfloat16, True, None, 10000.0, 8192),
        ]
        for label, dtype, tied, rope_scaling, theta, context in cases:
            torch.manual_seed(len(label))
            cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                              num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=context,
                              rms_norm_eps=1e-5, rope_theta=theta, rope_scaling=rope_scaling,
                              tie_word_embeddings=tied)
            model = LlamaForCausalLM(cfg).to(dtype)
            with torch.no_grad():  # weights far from init, so attention and RoPE matter
                for p in model.parameters():
                    p.normal_(0, 0.3 if p.dim() == 2 else 1.0)
            d = self.path(f"from_hf_{label}")
            model.save_pretrained(d, max_shard_size="60KB")
            tokens = [int(t) for t in rng.integers(0, 96, self.T + 1)]
            data = self.shard(tokens, 96, f"data_{label}")
            out = self.path(f"{label}.safetensors")
            self.ctitan("convert", "--from", "hf", "--model", d, "--out", out)
            shards = os.path.exists(os.path.join(d, "model.safetensors.index.json"))
            # The reference is the directory as transformers loads it in fp32: model.float() would
            # keep the RoPE inv_freq buffer that .to(bfloat16) rounded.
            want = self.hf_loss(LlamaForCausalLM.from_pretrained(d, **self.fp32), tokens)
            got = self.ctitan_loss(out, data)
            self.check(f"{label}_import_loss_matches_transformers", shards and abs(got - want) <= 1e-5 * abs(want),
                       f"ctitan {got:.7f}, transformers {want:.7f}, sharded {shards}")

    # ---- 5: Qwen3-MoE (the llama3_moe family) ----------------------------------------------------
    def moe_checks(self, rng):
        import torch
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        vocab = 96
        model_file = self.train("moe", vocab, ["--model.name", "llama3_moe", "--model.ffn_hidden_dim", "48",
                                               "--model.rope_theta", "10000", "--model.rope_scaling", "false"])
        tokens = [int(t) for t in rng.integers(0, vocab, self.T + 1)]
        data = self.shard(tokens, vocab, "data_moe")
        hf = self.path("hf_moe")
        self.ctitan("convert", "--to", "hf", "--model", model_file, "--out", hf)
        want = self.ctitan_loss(model_file, data)
        with LoadLog() as log:
            model = Qwen3MoeForCausalLM.from_pretrained(hf, **self.fp32)
        self.check("qwen3_moe_export_loads_without_warning", not log.lines, " | ".join(log.lines))
        got = self.hf_loss(model, tokens)
        self.check("qwen3_moe_loss_matches_ctitan_eval", abs(got - want) <= 1e-5 * abs(want),
                   f"transformers {got:.7f}, ctitan {want:.7f}")
        torch.manual_seed(3)
        cfg = Qwen3MoeConfig(vocab_size=vocab, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                             mlp_only_layers=[], max_position_embeddings=4096, rms_norm_eps=1e-6,
                             rope_theta=10000.0, tie_word_embeddings=False)
        model = Qwen3MoeForCausalLM(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.3 if p.dim() >= 2 else 1.0)
        d = self.path("from_hf_qwen3_moe")
        model.save_pretrained(d)
        out = self.path("qwen3_moe.safetensors")
        self.ctitan("convert", "--from", "hf", "--model", d, "--out", out)
        want = self.hf_loss(Qwen3MoeForCausalLM.from_pretrained(d, **self.fp32), tokens)
        got = self.ctitan_loss(out, data)
        self.check("qwen3_moe_import_loss_matches_transformers", abs(got - want) <= 1e-5 * abs(want),
                   f"ctitan {got:.7f}, transformers {want:.7f}")
        # The q/k norm weights must be permuted into ctitan's interleaved RoPE order: the same folder
        # with them already in that order (so imported unpermuted) gives another loss. The weights
        # are random here; a trained tiny model's stay near 1, where the order hardly shows.
        hd = cfg.head_dim
        with torch.no_grad():
            for layer in model.model.layers:
                for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                    w = norm.weight
                    w.copy_(w.view(2, hd // 2).transpose(0, 1).reshape(hd))
        d2 = self.path("from_hf_qwen3_moe_unpermuted")
        model.save_pretrained(d2)
        out2 = self.path("qwen3_moe_unpermuted.safetensors")
        self.ctitan("convert", "--from", "hf", "--model", d2, "--out", out2)
        wrong = self.ctitan_loss(out2, data)
        self.check("qwen3_moe_unpermuted_norms_change_the_loss", abs(wrong - want) > 1e-3 * abs(want),
                   f"unpermuted {wrong:.7f} vs {want:.7f}")

    def run(self):
        import numpy as np

        rng = np.random.default_rng(7)
        tokenizer = self.path("tok.tiktoken")
        corpus = os.path.join(os.path.dirname(__file__), "..", "fixtures", "data", "corpus")
        self.ctitan("tokenizer", "train", "--input", corpus, "--vocab-size", "300", "--out", tokenizer)
        for label, extra in [("llama31_rope", []),
                             ("plain_rope", ["--model.rope_theta", "10000", "--model.rope_scaling", "false"])]:
            model_file = self.train(label, 300, extra)
            hf = self.export_checks(label, model_file, tokenizer, 300, rng, check_rows=label == "plain_rope")
        self.tokenizer_checks(hf, tokenizer)
        self.import_checks(rng)
        self.moe_checks(rng)
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


if __name__ == "__main__":
    sys.exit(main())
