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
for n in toml cli safetensors tokenizer tokenizer_json shard prepare manifest hf_config hf_index schedule_csv hardware metrics; do mkdir -p "$c/$n"; rm -f "$c/$n"/seed-*; done
# Prefix byte + file, for the targets whose first byte picks options.
with_byte() { printf "\\x$(printf %02x "$1")" >"$3"; cat "$2" >>"$3"; }

# A tiny model, trained one step, with checkpoints (model fp32 / bf16; dims as small as allowed).
tiny=(--model.dim 8 --model.n_heads 2 --model.vocab_size 16 --model.ffn_hidden_dim 8 --training.steps 1
      --training.seq_len 4 --micro_batch_size 1 --checkpoint.enable --checkpoint.interval 1)
"$bin" train "${tiny[@]}" --model.n_layers 1 --model.n_kv_heads 1 --job.dump_folder "$tmp/a" \
  --checkpoint.last_save_model_only false >/dev/null
"$bin" train "${tiny[@]}" --model.n_layers 2 --model.n_kv_heads 2 --job.dump_folder "$tmp/b" \
  --checkpoint.export_dtype bf16 >/dev/null
"$bin" train "${tiny[@]}" --model.n_layers 1 --model.n_kv_heads 1 --job.dump_folder "$tmp/c" --training.steps 6 \
  --checkpoint.enable false --metrics.log_freq 1 --validation.enable --validation.freq 2 --validation.steps 1 >/dev/null
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
# tokenizer.json: the hand fixtures (string and pair merges), and one with NFC and GPT-2's ByteLevel.
cp tests/fixtures/tokenizer/hand_json/tokenizer.json "$c/tokenizer_json/seed-hand"
cp tests/fixtures/tokenizer/hand_pairs.tokenizer.json "$c/tokenizer_json/seed-hand-pairs"
sed -e 's/"normalizer": null/"normalizer": {"type": "NFC"}/' tests/fixtures/tokenizer/hand_pairs.tokenizer.json \
  >"$c/tokenizer_json/seed-nfc"
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

# Hugging Face config.json: what ctitan exports (with Llama 3.1 RoPE scaling, the default, and
# without), and
# Meta's configs as transformers 4 and 5 write them.
"$bin" convert --to hf --model "$tmp/a/model.safetensors" --out "$tmp/hf" >/dev/null
cp "$tmp/hf/config.json" "$c/hf_config/seed-ctitan-export"
"$bin" train "${tiny[@]}" --model.n_layers 1 --model.n_kv_heads 1 --model.rope_scaling false --job.dump_folder "$tmp/d" \
  >/dev/null
"$bin" convert --to hf --model "$tmp/d/model.safetensors" --out "$tmp/hfd" >/dev/null
cp "$tmp/hfd/config.json" "$c/hf_config/seed-ctitan-no-rope-scaling"
cat >"$c/hf_config/seed-llama31-8b" <<'JSON'
{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256
}
JSON
cat >"$c/hf_config/seed-llama3-8b" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
 "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
 "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
 "rope_scaling": null, "rope_theta": 500000.0, "tie_word_embeddings": false, "vocab_size": 128256}
JSON
cat >"$c/hf_config/seed-transformers5-tied" <<'JSON'
{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
 "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
 "ctitan_flavor": "1B \u00e9\n", "ctitan_max_seq_len": 2048}
JSON

# model.safetensors.index.json for the target's own tiny model (fuzz_hf_index.c builds its
# shards): as transformers writes it, and one sending tensors to the shard of odd copies.
python3 - "$c/hf_index" <<'PY'
import json, sys
d = sys.argv[1]
def layer(l):
    return ["model.layers.%d.%s.weight" % (l, s) for s in
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")]
one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
wm = {n: one for n in ["model.embed_tokens.weight"] + layer(0)}
wm.update({n: two for n in layer(1) + ["model.norm.weight", "lm_head.weight"]})
json.dump({"metadata": {"total_size": 4608}, "weight_map": dict(sorted(wm.items()))},
          open(d + "/seed-two-shards", "w"), indent=2)
wm["model.norm.weight"] = wm["model.layers.0.input_layernorm.weight"] = "odd.safetensors"
wm["model.layers.1.self_attn.rotary_emb.inv_freq"] = two
json.dump({"metadata": {}, "weight_map": wm}, open(d + "/seed-odd-copies", "w"))
wm["model.embed_tokens.weight"] = "odd.safetensors"
json.dump({"weight_map": wm}, open(d + "/seed-wrong-dtype", "w"))
PY

# Pipeline schedules as `ctitan pipeline show --csv` writes them, each after its byte:
# pp - 1 | (vpp - 1) << 2 | (micro-batches - 1) << 3 | V-shape 64.
sched() {  # NAME BYTE SCHEDULE PP VPP M
  "$bin" pipeline show --schedule "$3" --pp "$4" --vpp "$5" --microbatches "$6" --csv "$tmp/s.csv" >/dev/null
  with_byte "$2" "$tmp/s.csv" "$c/schedule_csv/seed-$1"
}
sched 1f1b 25 1F1B 2 1 4
sched gpipe 59 GPipe 4 1 8
sched interleaved 29 Interleaved1F1B 2 2 4
sched zb 29 InterleavedZeroBubble 2 2 4
sched zbv 93 ZBVZeroBubble 2 2 4
printf '# hand-written: comments, blanks, spaces and empty cells\n\n 0F0 , 0SEND_F0,,0RECV_B0,0B0,REDUCE_GRADS,RESHARD\n1RECV_F0,1F0,1B0,1SEND_B0,REDUCE_GRADS,RESHARD\r\n' >"$tmp/s.csv"
with_byte 1 "$tmp/s.csv" "$c/schedule_csv/seed-hand"

# Hardware profiles: the shipped ones.
for p in profiles/*.toml; do cp "$p" "$c/hardware/seed-$(basename "$p" .toml)"; done

# metrics.jsonl: a run with validation, and hand-written gaps, blanks and tokens; first byte:
# --logy 1, --diff 2, --smooth (byte >> 2 & 7).
with_byte 0 "$tmp/c/metrics.jsonl" "$c/metrics/seed-run"
with_byte 13 "$tmp/c/metrics.jsonl" "$c/metrics/seed-run-logy-smooth3"
printf '{"step": 1, "loss": 10.5, "tokens_per_s": 4096.0, "step_seconds": 0.25}\n{"step": 2, "loss": null}\n\n{"step": 3, "loss": 9.25, "val_loss": 9.5}\n  \n{"step": 5, "loss": 8.0, "val_loss": null, "grad_norm": 1.5}\r\n' >"$tmp/m.jsonl"
with_byte 2 "$tmp/m.jsonl" "$c/metrics/seed-gaps-diff"

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
for n in toml cli safetensors tokenizer tokenizer_json shard prepare manifest hf_config hf_index schedule_csv hardware metrics; do echo "$n: $(ls "$c/$n" | wc -l) seeds, $(du -sk "$c/$n" | cut -f1) KiB"; done

# The corpus readers' targets (text, JSONL, Parquet, Megatron): their own script.
bash tests/fuzz/make_corpus_readers.sh
