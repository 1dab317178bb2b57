#!/usr/bin/env bash
# The main job (`make run`): prepare the default corpus, train the debug model on it with two
# ranks of data sharding (FSDP), print the validation loss, and sample from the trained model.
#   NRANKS=1 make run       trains in one process instead
#   STEPS=50 make run       a shorter run
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=data/fortunes
TOKENIZER=$DATA/tokenizer.tiktoken
NRANKS=${NRANKS:-2}
STEPS=${STEPS:-300}

bash scripts/prepare_data.sh

echo "== training the debug model: $NRANKS rank(s) of data sharding, $STEPS steps"
# --job.overwrite: `make run` again replaces the previous main job's outputs (its metrics kept aside).
NRANKS=$NRANKS CONFIG=configs/llama3_debug.toml scripts/run_train.sh \
  --parallelism.data_shard_degree "$NRANKS" --training.steps "$STEPS" --job.overwrite true "$@"

MODEL=outputs/llama3_debug/model.safetensors
echo "== validation loss of the saved model"
build/ctitan eval --model "$MODEL" --data "$DATA/shards" --split val --batch 8
echo "== a sample"
build/ctitan generate --model "$MODEL" --tokenizer "$TOKENIZER" --prompt "The meaning of life is" \
  --max_new_tokens 60 --temperature 0.8 --top_k 40 --seed 1
