#!/usr/bin/env bash
# Every file reader refuses what is not a regular file, and a file over its size limit, before
# reading: one line on stderr naming the file, a non-zero exit, within seconds.
#   - a FIFO (no writer) as --model (eval, generate), to `data info`, as a config file, a
#     tokenizer, a `data prepare` input, a Hugging Face config.json, a metrics file to plot:
#     opening one for reading used to block forever;
#   - /dev/zero as a tokenizer, a config file, an `encode --input`: used to be read until memory
#     ran out (the commands run under `ulimit -v`, so the old code fails fast instead);
#   - a config file and a tokenizer file over their limits (sparse files, no disk used).
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
if [ ! -x "$bin" ]; then echo "SKIP nonregular_files: $bin not built"; exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/fifo"
tok=tests/fixtures/data/bytes.tiktoken
export OMP_NUM_THREADS=1

# The memory cap: `ulimit -v 4000000`, except for a binary built with AddressSanitizer (make test
# SANITIZE=1), whose runtime reserves terabytes of address space at start and could not start
# under it; the runtime's own resident-size cap stands in (the process ends once it holds 4 GB).
if ldd "$bin" 2>/dev/null | grep -q libasan; then
  cap_memory() { export ASAN_OPTIONS="${ASAN_OPTIONS:-}:hard_rss_limit_mb=4000"; }
else
  cap_memory() { ulimit -v 4000000; }
fi

# name, file the message must name, words it must hold, command...
check() {
  local name=$1 file=$2 word=$3; shift 3
  local err rc
  err=$( (cap_memory; timeout 20 "$@") 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
     [[ "$err" == *"$file"* ]] && [[ "$err" == *"$word"* ]]; then
    echo "PASS $name"
  else
    echo "FAIL $name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out: blocked)'): $(printf '%s' "$err" | head -c 300)"
  fi
}
nr="not a regular file"
check fifo_as_eval_model "$tmp/fifo" "$nr" "$bin" eval --model "$tmp/fifo" --data "$tmp"
check fifo_as_generate_model "$tmp/fifo" "$nr" "$bin" generate --model "$tmp/fifo" --tokenizer $tok --prompt hi
check fifo_to_data_info "$tmp/fifo" "$nr" "$bin" data info "$tmp/fifo"
check fifo_as_tokenizer "$tmp/fifo" "$nr" "$bin" tokenizer encode --tokenizer "$tmp/fifo" --text hi
check fifo_as_config "$tmp/fifo" "$nr" "$bin" train --config "$tmp/fifo"
check fifo_as_prepare_input "$tmp/fifo" "$nr" "$bin" data prepare --input "$tmp/fifo" --tokenizer $tok --out "$tmp/d" --quiet
check fifo_as_encode_input "$tmp/fifo" "$nr" "$bin" tokenizer encode --tokenizer $tok --input "$tmp/fifo"
check dev_zero_as_tokenizer /dev/zero "$nr" "$bin" tokenizer encode --tokenizer /dev/zero --text hi
check dev_zero_as_generate_tokenizer /dev/zero "$nr" "$bin" generate --model "$tmp/none" --tokenizer /dev/zero --prompt hi
check dev_zero_as_config /dev/zero "$nr" "$bin" train --config /dev/zero
check dev_zero_as_encode_input /dev/zero "$nr" "$bin" tokenizer encode --tokenizer $tok --input /dev/zero
check dev_zero_as_prepare_tokenizer /dev/zero "$nr" "$bin" data prepare --input $tok --tokenizer /dev/zero --out "$tmp/d" --quiet
check directory_as_model "$tmp" "$nr" "$bin" eval --model "$tmp" --data "$tmp"
# JSON readers (core/json): a Hugging Face folder whose config.json is a FIFO, and a FIFO as the
# metrics file to plot.
mkdir -p "$tmp/hf" && mkfifo "$tmp/hf/config.json"
check fifo_as_hf_config "$tmp/hf/config.json" "$nr" "$bin" convert --from hf --model "$tmp/hf" --out "$tmp/m.safetensors"
check fifo_to_plot "$tmp/fifo" "$nr" "$bin" plot "$tmp/fifo" --out "$tmp/p.svg"

# Over the size limits: sparse files of 2 GiB (nothing is read; the size is enough).
truncate -s 2G "$tmp/big.toml" "$tmp/big.tiktoken"
check config_over_limit "$tmp/big.toml" "limit" "$bin" train --config "$tmp/big.toml"
check tokenizer_over_limit "$tmp/big.tiktoken" "limit" "$bin" tokenizer encode --tokenizer "$tmp/big.tiktoken" --text hi
