#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/NAME/seed-*) from real files:
# what ctitan itself writes (a tiny model in fp32 and bf16, a checkpoint's rank file, manifest
# and effective config, a trained rank file, shards from `data prepare`), the repository's
# configs and fixtures, and a few hand-written inputs for formats ctitan only reads (llm.c
# shards, other safetensors dtypes). Regression seeds (crash-*, added by hand after a fix) are
# kept. The seeds are committed; run this again only when a format changes.
#   usage: tests/fuzz/make_corpus.sh [BUILD]    (BUILD/ctitan is used; default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build}/ctitan
[ -x "$bin" ] || { echo "make_corpus: $bin not built"; exit 1; }
c=tests/fuzz/corpus
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for n in toml cli safetensors tokenizer shard prepare manifest; do mkdir -p "$c/$n"; rm -f "$c/$n"/seed-*; done
# Prefix byte + file, for the targets whose first byte picks options.
with_byte() { printf "\\x$(printf %02x "$1")" >"$3"; cat "$2" >>"$3"; }

# A tiny model, trained one step, with checkpoints (model fp32 / bf16; dims as small as allowed).
tiny=(--model.dim 8 --model.n_heads 2 --model.vocab_size 16 --model.ffn_hidden_dim 8 --training.steps 1
      --training.seq_len 4 --micro_batch_size 1 --checkpoint.enable --checkpoint.interval 1)
"$bin" train "${tiny[@]}" --model.n_layers 1 --model.n_kv_heads 1 --job.dump_folder "$tmp/a" \
  --checkpoint.last_save_model_only false >/dev/null
"$bin" train "${tiny[@]}" --model.n_layers 2 --model.n_kv_heads 2 --job.dump_folder "$tmp/b" \
  --checkpoint.export_dtype bf16 >/dev/null
cp "$tmp/a/model.safetensors" "$c/safetensors/seed-model-f32"
cp "$tmp/b/model.safetensors" "$c/safetensors/seed-model-bf16"
cp "$tmp/a/checkpoint/step-1/rank-00000.safetensors" "$c/safetensors/seed-checkpoint-rank"
cp "$tmp/a/checkpoint/step-1/manifest.toml" "$c/manifest/seed-full"
cp "$tmp/b/checkpoint/step-1/manifest.toml" "$c/manifest/seed-model-only"
cp "$tmp/a/config.toml" "$c/toml/seed-effective-config"
# Other dtypes and an empty file, as the format allows and ctitan does not write.
python3 - "$c/safetensors" <<'PY'
import json, struct, sys
def st(path, tensors, meta=None):
    header, data = {}, b""
    if meta: header["__metadata__"] = meta
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
d = sys.argv[1]
st(d + "/seed-dtypes", {"h": ("F16", [2, 2], struct.pack("<4e", 1, -2, 0.5, 65504)),
                        "i": ("I32", [3], struct.pack("<3i", 1, -1, 7)),
                        "u": ("U8", [0], b""), "s": ("F32", [], struct.pack("<f", 3.5))},
   {"format": "pt", "note": "hand-written"})
st(d + "/seed-empty", {})
PY

# Rank files: the fixtures and one trained here (merges, specials at their default ids).
cp tests/fixtures/tokenizer/hand.tiktoken "$c/tokenizer/seed-hand"
cp tests/fixtures/tokenizer/special.tiktoken "$c/tokenizer/seed-special"
cp tests/fixtures/data/bytes.tiktoken "$c/tokenizer/seed-bytes"
head -c 4000 /usr/share/games/fortunes/science >"$tmp/science.txt"
"$bin" tokenizer train --input "$tmp/science.txt" --vocab-size 300 --out "$c/tokenizer/seed-trained" >/dev/null

# Shards: prepared with that tokenizer (2-byte ids), one with 4-byte ids, one in llm.c's format.
head -c 600 tests/fixtures/data/corpus/a_fortunes >"$tmp/small.txt"
"$bin" data prepare --input "$tmp/small.txt" --tokenizer "$c/tokenizer/seed-trained" --out "$tmp/shards" \
  --val-fraction 0 --quiet >/dev/null
with_byte 0 "$tmp/shards/train_000.bin" "$c/shard/seed-prepared"
with_byte 1 "$tmp/shards/train_000.bin" "$c/shard/seed-prepared-limit300"
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
ids = [0, 70000, 65535, 3, 99999]
open(d + "/wide.bin", "wb").write(b"CTTOKENS" + struct.pack("<IIQI", 1, 4, len(ids), 100000) + bytes(36)
                                   + struct.pack("<%dI" % len(ids), *ids))
ids = [50256, 1, 2, 3, 4, 65535]
hdr = [20240520, 1, len(ids)] + [0] * 253
open(d + "/llmc.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(ids), *ids))
PY
with_byte 3 "$tmp/wide.bin" "$c/shard/seed-wide"
with_byte 2 "$tmp/llmc.bin" "$c/shard/seed-llmc"

# Corpus files for prepare: fortune format, plain text, several documents per shard.
with_byte 5 "$tmp/small.txt" "$c/prepare/seed-fortunes"        # val 0.05, 4 tokens per shard
printf 'A plain file is one document.\n%% inside a line is not a separator.\n' >"$tmp/plain.txt"
with_byte 0 "$tmp/plain.txt" "$c/prepare/seed-plain"
printf 'one\n%%\n\n%%\ntwo\n%%\nthree\n' >"$tmp/three.txt"
with_byte 250 "$tmp/three.txt" "$c/prepare/seed-three-docs"   # val 0.25, 248 tokens per shard

# TOML: the repository's configs and fixtures, and one with every construct the reader knows.
cp configs/llama3_debug.toml "$c/toml/seed-llama3-debug"
cp configs/llama3_405b_at_scale.toml "$c/toml/seed-llama3-405b"
cp tests/fixtures/config/torchtitan_names.toml "$c/toml/seed-torchtitan-names"
cat >"$c/toml/seed-syntax" <<'TOML'
# every construct of core/toml.h
title = "TOML \"basic\" \u00e9 \t"
literal = 'C:\path'
multi = """
two \
  lines"""
multi_lit = '''raw
text'''
ints = [1_000, 0xff, 0o17, 0b101, -7, +3]
floats = [1.5, -2e-3, 6.02E23, inf, -inf, nan]
bools = [true, false]
nested = [[1, 2], ["a", 'b'], [{x = 1}],]
"quoted key" = 1
dotted.key.here = "v"
inline = { a = 1, b.c = [2] }
[training]
steps = 10
[parallelism]
data_shard_degree = -1
[[file]]
name = "a"
[[file]]
name = "b"
[a.b.c]
d = 1.0
TOML

# Command lines (one argument per line).
printf -- '--model.dim\n64\n--model.n_layers=2\n--training.steps\n3\n--parallelism.data_shard_degree\n-1\n' >"$c/cli/seed-overrides"
printf -- '--config\nconfigs/llama3_debug.toml\n--optimizer.lr\n1e-3\n--activation_checkpoint.selective\n--mixed_precision\nbf16\n' >"$c/cli/seed-config-file"
printf -- '--job.config_file=configs/llama3_8b.toml\n--training.local_batch_size=2\n--quantization.float8.enable\nfalse\n--metrics.device\nh100\n--job.dump_folder\nout dir\n' >"$c/cli/seed-aliases"
printf -- '--lr_scheduler.decay_type\ncosine\n--lr_scheduler.decay_ratio\n0.5\n--checkpoint.keep_latest_k=0\n--parallelism.pipeline_split_points\nlayers.4,layers.8\n' >"$c/cli/seed-strings"
for n in toml cli safetensors tokenizer shard prepare manifest; do echo "$n: $(ls "$c/$n" | wc -l) seeds, $(du -sk "$c/$n" | cut -f1) KiB"; done
