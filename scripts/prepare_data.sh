#!/usr/bin/env bash
# The default corpus (`make data`; `make run` does it first): Debian's fortunes package, 2.6 MB of
# English text, as a 2048-token byte-level BPE tokenizer and token shards in data/fortunes/,
# which configs/llama3_debug.toml reads. Each part is made once; delete data/fortunes to redo it.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=/usr/share/games/fortunes
DATA=data/fortunes
TOKENIZER=$DATA/tokenizer.tiktoken
bin=${CTITAN_BIN:-build/ctitan}

[ -x "$bin" ] || { echo "prepare_data.sh: '$bin' is not built (run make)" >&2; exit 2; }
[ -d "$CORPUS" ] || { echo "prepare_data.sh: $CORPUS not found: run make setup (it installs the fortunes package)" >&2; exit 2; }
# The corpus's plain-text files (the package also ships index files *.dat and *.u8 duplicates).
mapfile -t TEXTS < <(find "$CORPUS" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)

if [ ! -f "$TOKENIZER" ]; then
  echo "== training a 2048-token BPE tokenizer on $CORPUS"
  mkdir -p "$DATA"
  "$bin" tokenizer train --input "${TEXTS[@]}" --vocab-size 2048 --out "$TOKENIZER"
fi
if [ ! -f "$DATA/shards/train_000.bin" ]; then
  echo "== tokenising the corpus into $DATA/shards"
  "$bin" data prepare --input "$CORPUS" --tokenizer "$TOKENIZER" --out "$DATA/shards"
fi
echo "== $DATA: $TOKENIZER and $DATA/shards are ready"
