#!/usr/bin/env python3
"""ctitan's tokenizer.json reader against Hugging Face `tokenizers` itself (`make test-interop`).

Builds byte-level BPE tokenizers offline, saves each with transformers' save_pretrained, and
checks that `ctitan tokenizer encode` gives the ids `tokenizers` gives, on 9,000 random strings
per tokenizer (mixed scripts, whitespace runs, digits, punctuation, combining marks, emoji, and
special tokens in the middle) and on real text (Python standard library sources), with special
tokens found (`--specials`, tokenizers' default) and left as text (tokenizers'
encode_special_tokens). The tokenizers:
  gpt2   trained by tokenizers' BpeTrainer: ByteLevel pre-tokenizer (GPT-2's regex), the special
         token first (id 0), a non-special added token; string merges as tokenizers saves them
  llama3 transformers' TikTokenConverter (how Meta's Llama 3 tokenizer.json was made) applied to
         a rank file `ctitan tokenizer train` wrote, with Llama 3's pattern, specials after the
         ranks and ignore_merges; its hash must equal the rank file's, and the rank file must
         encode every string as the tokenizer.json does
  qwen   trained with Qwen2's Split pattern and NFC normalizer, specials added after the vocabulary
         and added tokens that are not special
Needs `tokenizers` and `transformers` (and `tiktoken` for llama3): when they do not import, they
are pip-installed into a venv under $BUILD (build/interop-venv) and the script runs again there;
when that fails too (no pip, no network), prints one SKIP line and exits 0.
Prints PASS/FAIL lines and "N passed, N failed"; exits 1 when anything failed.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile


def ensure_packages():
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        pass
    if os.environ.get("CT_INTEROP_VENV"):  # already the venv's interpreter: give up
        return False
    venv = os.path.join(os.environ.get("BUILD", "build"), "interop-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        print(f"hf_tokenizer_json: creating {venv} and installing tokenizers, transformers, tiktoken (pip)", flush=True)
        if subprocess.run([sys.executable, "-m", "venv", venv]).returncode != 0:
            return False
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "tokenizers", "transformers", "tiktoken"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"hf_tokenizer_json: pip failed: {r.stderr.strip().splitlines()[-1:]}")
        return False
    env = dict(os.environ, CT_INTEROP_VENV="1")
    sys.exit(subprocess.run([py] + sys.argv, env=env).returncode)


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def stdlib_texts():
    """Real text: the sources of a few standard library modules (always there, offline)."""
    import argparse as a, collections as c, email.message as e, json.decoder as jd, textwrap as t, difflib as d
    out = []
    for m in (a, c, e, jd, t, d):
        with open(m.__file__, encoding="utf-8") as f:
            out.append(f.read())
    return out


# ---- random strings -----------------------------------------------------------------------------

SCRIPTS = [  # (first, last) code points of well-established letters / digits
    (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x391, 0x3C9), (0x410, 0x44F), (0x5D0, 0x5EA),
    (0x627, 0x64A), (0x915, 0x939), (0xE01, 0xE2E), (0x3041, 0x3096), (0x30A1, 0x30FA),
    (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x660, 0x669), (0xFF10, 0xFF19), (0x2160, 0x216F),
]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\x0b", "\x0c",
          "\u2009", " \n ", "\t\t", "   \n", "\u180e", "\u200b", "\x1c"]
PUNCT = list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "--", "->", "«", "»", "“", "”", "—", "…", "¿", "¡", "§",
                                                       "€", "£", "©", "°", "±", "×", "÷", "→", "✓", "♥"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "n't", "'", "''", "'\u017f", "'\u212a"]
COMBINING = list(range(0x300, 0x36F)) + [0x1161, 0x11A8]  # marks, and Hangul jamo (NFC composes them)
EMOJI = ["😀", "👍🏽", "👩\u200d💻", "❤\ufe0f", "🇫🇷", "🙂", "🎉", "🐍"]


def rand_word(rng):
    lo, hi = rng.choice(SCRIPTS)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 9)))


def rand_piece(rng, specials):
    r = rng.random()
    if r < 0.22:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 10)))
        return w.capitalize() if rng.random() < 0.3 else (w.upper() if rng.random() < 0.1 else w)
    if r < 0.40:
        return rand_word(rng)
    if r < 0.48:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
    if r < 0.58:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
    if r < 0.70:
        return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 3)))
    if r < 0.76:
        return rng.choice(CONTRACTIONS)
    if r < 0.82:  # a base letter with combining marks (e + U+0301 is é under NFC)
        return rng.choice("aeiouAEnc") + "".join(chr(rng.choice(COMBINING)) for _ in range(rng.randint(1, 2)))
    if r < 0.86:
        return rng.choice(EMOJI)
    if r < 0.94 and specials:
        return rng.choice(specials)
    return chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x24F), rng.randint(0x370, 0x3FF),
                           rng.randint(0x2000, 0x206F), rng.randint(0x3000, 0x303F)]))


def rand_string(rng, specials):
    s = "".join(rand_piece(rng, specials) + (rng.choice(SPACES) if rng.random() < 0.35 else "")
                for _ in range(rng.randint(1, 14)))
    return s.replace("\x00", "")


class Checks:
    N_STRINGS = 9000

    def __init__(self, binary, tmp):
        self.bin, self.tmp = binary, tmp
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}" + (f" ({detail})" if detail else ""))
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")

    def ctitan(self, *argv):
        r = subprocess.run([self.bin, *argv], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ctitan {' '.join(argv[:3])}...: {r.stderr.strip()}")
        return r.stdout

    def ctitan_ids(self, tok_dir, texts, specials):
        path = os.path.join(self.tmp, "texts.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps(t) + "\n")
        argv = ["tokenizer", "encode", "--tokenizer", tok_dir, "--input", path, "--jsonl"] + (["--specials"] if specials else [])
        out = self.ctitan(*argv).split("\n")
        return [[int(x) for x in line.split()] for line in out[:len(texts)]]

    # ---- the tokenizers ----------------------------------------------------------------------

    def build_gpt2(self, texts):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(texts, trainer)
        tok.add_tokens([AddedToken("<think>", special=False, normalized=False)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
        out = os.path.join(self.tmp, "gpt2")
        fast.save_pretrained(out)
        return out, ["<|endoftext|>", "<think>"]

    def build_llama3(self, texts):
        """A rank file from `ctitan tokenizer train`, converted as Meta's Llama 3 tokenizer was."""
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter
        corpus = os.path.join(self.tmp, "corpus")
        os.makedirs(corpus, exist_ok=True)
        for i, t in enumerate(texts):
            with open(os.path.join(corpus, f"{i:02d}.txt"), "w", encoding="utf-8") as f:
                f.write(t)
        rank = os.path.join(self.tmp, "llama3.tiktoken")
        self.ctitan("tokenizer", "train", "--input", corpus, "--vocab-size", "3000", "--out", rank)
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        plain = os.path.join(self.tmp, "llama3-ranks-only.tiktoken")  # tiktoken reads no "#special" lines
        with open(rank) as f, open(plain, "w") as g:
            g.write(f.read())
        with open(rank, "a") as f:  # the ids after <|begin_of_text|> 2998 and <|end_of_text|> 2999
            for i, s in enumerate(specials[2:]):
                f.write(f"#special {s} {3000 + i}\n")
        conv = TikTokenConverter(vocab_file=plain, pattern=LLAMA3_PATTERN, extra_special_tokens=specials).converted()
        fast = PreTrainedTokenizerFast(tokenizer_object=conv, bos_token=specials[0], eos_token=specials[1])
        out = os.path.join(self.tmp, "llama3")
        fast.save_pretrained(out)
        return out, specials, rank

    def build_qwen(self, texts):
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts, trainer)
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                        AddedToken("</tool_call>", special=False, normalized=False)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|endoftext|>")
        out = os.path.join(self.tmp, "qwen")
        fast.save_pretrained(out)
        return out, specials + ["<tool_call>", "</tool_call>"]

    # ---- the comparisons ---------------------------------------------------------------------

    def compare(self, label, tok_dir, specials, real, rank_file=None):
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer
        hf = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
        rng = random.Random(f"ctitan-{label}")
        strings = [rand_string(rng, specials) for _ in range(self.N_STRINGS)]
        for mode in (True, False):
            hf.encode_special_tokens = not mode
            want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
            got = self.ctitan_ids(tok_dir, strings, mode)
            same = sum(g == w for g, w in zip(got, want))
            bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), None)
            detail = f"{same} of {len(strings)} strings identical"
            if bad is not None:
                detail += f"; first difference: {strings[bad]!r}: ctitan {got[bad]} vs tokenizers {want[bad]}"
            self.check(f"{label}_random_strings_{'specials' if mode else 'ordinary'}", same == len(strings), detail)
            if rank_file and mode:  # the rank file itself, through ctitan's tiktoken path
                got_r = self.ctitan_ids(rank_file, strings, mode)
                same_r = sum(g == w for g, w in zip(got_r, want))
                self.check(f"{label}_rank_file_random_strings", same_r == len(strings),
                           f"{same_r} of {len(strings)} strings identical to the tokenizer.json's ids")
        hf.encode_special_tokens = False
        # transformers' loader reads the same folder the same way (a sample; it is slower).
        at = AutoTokenizer.from_pretrained(tok_dir)
        sample = strings[:300]
        same_at = sum(at(s, add_special_tokens=False)["input_ids"] == hf.encode(s, add_special_tokens=False).ids
                      for s in sample)
        self.check(f"{label}_transformers_agrees", same_at == len(sample), f"{same_at} of {len(sample)}")
        # Real text, whole files.
        total, same_t = 0, 0
        for i, text in enumerate(real):
            path = os.path.join(self.tmp, f"real{i}.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            got = [int(x) for x in self.ctitan("tokenizer", "encode", "--tokenizer", tok_dir, "--input", path,
                                               "--specials").split()]
            want = hf.encode(text, add_special_tokens=False).ids
            total += len(want)
            same_t += got == want
        self.check(f"{label}_real_text", same_t == len(real), f"{same_t} of {len(real)} files identical, {total} ids")

    def run(self):
        real = stdlib_texts()
        # Trained on real text and on random strings of another seed, so that merges reach the rare
        # characters too (where no merge touches a character, a split in the wrong place cannot
        # change the ids, and the comparison would not see it).
        rng = random.Random("ctitan-training")
        noise = "\n".join(rand_string(rng, []) for _ in range(4000))
        train = real[:4] + [noise]
        gpt2, sp = self.build_gpt2(train)
        self.compare("gpt2", gpt2, sp, real)
        try:
            import tiktoken  # noqa: F401
            llama3, sp, rank = self.build_llama3(train)
            h_json = [l for l in self.ctitan("tokenizer", "info", "--tokenizer", llama3).splitlines() if l.startswith("hash ")]
            h_rank = [l for l in self.ctitan("tokenizer", "info", "--tokenizer", rank).splitlines() if l.startswith("hash ")]
            self.check("llama3_hash_equals_rank_file", h_json == h_rank and h_json, f"{h_json} vs {h_rank}")
            self.compare("llama3", llama3, sp, real, rank_file=rank)
        except ImportError:
            print("SKIP llama3: tiktoken does not import (pip install tiktoken)")
        qwen, sp = self.build_qwen(train)
        self.compare("qwen", qwen, sp, real)
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "ctitan"))
    args = ap.parse_args()
    if not ensure_packages():
        print("SKIP hf_tokenizer_json: tokenizers / transformers do not import and could not be installed")
        return 0
    if not os.access(args.bin, os.X_OK):
        print(f"FAIL hf_tokenizer_json: no ctitan binary at {args.bin} (make first)")
        return 1
    import logging
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        return Checks(os.path.abspath(args.bin), tmp).run()


if __name__ == "__main__":
    sys.exit(main())
