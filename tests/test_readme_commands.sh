#!/usr/bin/env bash
# The README's step-by-step block (the fenced block after the line "<!-- tests/test_readme_commands.sh
# runs the next block -->") works as written, in order, on a fresh clone: a copy of the tree's
# files without data/, outputs/ or a build (build/ is linked to this tree's, already built, so
# `make` has nothing to do). Each `--training.steps N` becomes 2; a training command without one
# fails the test, so the block stays quick to check. Then the runs' outputs are where the block
# says.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD:-build}
[ -x "$build/ctitan" ] || { echo "FAIL readme_commands: $build/ctitan not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT; [ -n "${KEEP:-}" ] && trap - EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# The block: continuation lines joined, comments (after two spaces and '#') dropped.
block=$(awk '/^<!-- tests\/test_readme_commands.sh runs the next block -->$/ { want = 1; next }
             want && /^```/ { if (inside) exit; inside = 1; next }
             inside { print }' README.md |
        sed -e 's/[[:space:]][[:space:]]*#.*$//' | awk '{ if (sub(/\\$/, "")) { line = line $0 } else { print line $0; line = "" } }')
n=$(grep -c . <<<"$block")
if [ "$n" -lt 5 ]; then fail readme_block_found "$n commands in the README's block"; exit 0; fi
pass "readme_block_found ($n commands)"

# A fresh clone: the files git would commit, their times kept, nothing that was made or downloaded.
copy=$tmp/ctitan
mkdir -p "$copy"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$copy"
else
  tar --exclude=./data --exclude=./outputs --exclude='./build*' -cf - . | tar -xf - -C "$copy"
fi
rm -rf "$copy/data" "$copy/outputs" "$copy/build"
ln -s "$root/$build" "$copy/build"

i=0
while IFS= read -r cmd; do
  [ -n "$cmd" ] || continue
  i=$((i + 1))
  run=$cmd
  if [[ $cmd == *" train "* ]] || [[ $cmd == *run_train.sh* ]]; then
    if [[ $cmd != *"--training.steps "* ]]; then fail "readme_command_$i" "a training without --training.steps: $cmd"; continue; fi
    run=$(sed -E 's/--training\.steps [0-9]+/--training.steps 2/' <<<"$cmd")
  fi
  start=$(date +%s)
  (cd "$copy" && OMP_NUM_THREADS=1 timeout 600 bash -c "$run") >"$tmp/out.$i" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then pass "readme_command_$i (${took}s): $cmd"
  else fail "readme_command_$i" "exit $rc: $cmd: $(grep -v '^step\|^ ' "$tmp/out.$i" | tail -3 | tr '\n' ' ')"; fi
done <<<"$block"

# What the block made, where it says.
[ -f "$copy/data/fortunes/shards/train_000.bin" ] && [ -f "$copy/data/fortunes/tokenizer.tiktoken" ] &&
  pass readme_data_prepared || fail readme_data_prepared "no data/fortunes in the copy"
[ -f "$copy/outputs/llama3_debug/model.safetensors" ] && pass readme_model_trained ||
  fail readme_model_trained "no outputs/llama3_debug/model.safetensors"
