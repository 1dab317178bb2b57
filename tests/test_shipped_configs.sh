#!/usr/bin/env bash
# Every config in configs/ either runs on this machine or is refused at once with one line: the
# layout it needs (ranks), the memory it would need per rank against what this machine has, or
# what of the model its family does not train yet (the planner's mixture-of-experts layouts) --
# never an allocation failure half-way through start-up. (Synthetic data, so no corpus is needed.)
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL shipped_configs: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
for c in configs/*.toml; do
  name=$(basename "$c" .toml)
  start=$(date +%s)
  timeout 120 "$bin" train --config "$c" --training.steps 1 --training.dataset synthetic --validation.enable false \
    --metrics.peak_tflops 1 --job.dump_folder "$tmp/$name" >"$tmp/$name.out" 2>&1; rc=$?
  took=$(( $(date +%s) - start ))
  said=$(grep -v '^step\|^ranks\|^model\|^precision\|^checkpoint: \|^validation' "$tmp/$name.out")
  if [ $rc -eq 0 ] && [ -f "$tmp/$name/model.safetensors" ]; then
    echo "PASS config_${name}_runs (${took}s)"
  elif [ $rc -ne 0 ] && [ "$(echo "$said" | grep -c .)" -eq 1 ] && [ "$took" -lt 30 ] &&
       echo "$said" | grep -qE "ranks, but the world has|which does not divide the world|needs about [0-9.]+ GiB per rank .* this machine has [0-9.]+ GiB available per rank|its blocks do not run .* yet|block does not run its .* yet"; then
    echo "PASS config_${name}_refused_up_front: $said"
  else
    echo "FAIL config_${name}: rc $rc after ${took}s: $(echo "$said" | head -2)"
  fi
done
