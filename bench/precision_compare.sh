#!/usr/bin/env bash
# Trains the default run (configs/llama3_debug.toml: same data, seed and lr schedule, which
# follows training.steps) in five precisions, one after another in one process each, and
# compares them with fp32:
#   fp32             --mixed_precision fp32
#   bf16             --mixed_precision bf16
#   float8_tensorwise  bf16 + --quantization.float8.enable true --quantization.float8.recipe tensorwise
#   float8_rowwise     bf16 + --quantization.float8.enable true --quantization.float8.recipe rowwise
#   mxfp8              bf16 + --quantization.mxfp8.enable true
# (the 8-bit modes run on top of bf16, as TorchTitan runs them).
#
#   bench/precision_compare.sh                       # 300 steps each, into outputs/precision
#   STEPS=12 VAL_FREQ=6 OUT=/tmp/prec bench/precision_compare.sh
#
# Environment: STEPS (default 300), VAL_FREQ (validation.freq, default 50; the last step is always
# validated), OUT (default outputs/precision; relative to the current folder), BUILD (build folder
# holding ctitan, default build) or BIN (the binary itself), MODES (a subset of the five, space
# separated; fp32 is the reference for the ratios), OMP_NUM_THREADS (default: all cores).
# Extra arguments are passed to every run (e.g. --training.seed 7).
#
# Each run writes $OUT/<mode>/{metrics.jsonl,train.log,model.safetensors}. Printed at the end and
# written to $OUT/summary.md: per mode the final validation loss and its ratio to fp32's against
# the bound (bf16 within 1%, 8-bit modes within 3%, either side), the median tokens/s (steps 2..,
# the first step is warm-up) and the peak activation memory (max of memory_peak_mib.activations),
# each with its ratio to fp32's, then each run's "precision:" line. $OUT/loss_curves.svg draws the
# training loss of every mode and, below, its difference to fp32 (`ctitan plot --diff`).
# Exits 1 if a run fails or leaves no validation loss.
set -u
here=$(pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${STEPS:-300}
VAL_FREQ=${VAL_FREQ:-50}
OUT=${OUT:-outputs/precision}
case $OUT in /*) ;; *) OUT=$here/$OUT ;; esac
BUILD=${BUILD:-build}
BIN=${BIN:-$BUILD/ctitan}
case $BIN in /*) ;; *) BIN=$root/$BIN ;; esac
MODES=${MODES:-fp32 bf16 float8_tensorwise float8_rowwise mxfp8}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
cd "$root" || exit 2

mode_args() {
  case $1 in
    fp32) echo "--mixed_precision fp32" ;;
    bf16) echo "--mixed_precision bf16" ;;
    float8_tensorwise) echo "--mixed_precision bf16 --quantization.float8.enable true --quantization.float8.recipe tensorwise" ;;
    float8_rowwise) echo "--mixed_precision bf16 --quantization.float8.enable true --quantization.float8.recipe rowwise" ;;
    mxfp8) echo "--mixed_precision bf16 --quantization.mxfp8.enable true" ;;
    *) return 1 ;;
  esac
}
bound() { case $1 in fp32) echo "" ;; bf16) echo 0.01 ;; *) echo 0.03 ;; esac; }

for m in $MODES; do mode_args "$m" >/dev/null || { echo "precision_compare: unknown mode $m" >&2; exit 2; }; done
[ -x "$BIN" ] || { echo "precision_compare: no binary $BIN (make, or set BUILD / BIN)" >&2; exit 2; }
mkdir -p "$OUT"
# A copy of the binary, so that a rebuild during the runs cannot mix two versions.
cp "$BIN" "$OUT/ctitan.bin"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " (+ uncommitted changes)")

failed=0
for m in $MODES; do
  dir=$OUT/$m
  mkdir -p "$dir"
  rm -f "$dir/metrics.jsonl"   # the trainer appends
  echo "== $m: $STEPS steps ($(mode_args "$m"))"
  start=$(date +%s)
  # shellcheck disable=SC2046
  "$OUT/ctitan.bin" train --config configs/llama3_debug.toml $(mode_args "$m") \
      --training.steps "$STEPS" --metrics.log_freq 1 --validation.enable true \
      --validation.freq "$VAL_FREQ" --job.dump_folder "$dir" "$@" > "$dir/train.log" 2>&1
  rc=$?
  grep -m1 '^precision:' "$dir/train.log" || true
  if [ $rc -ne 0 ]; then
    echo "   FAILED (exit $rc); the end of $dir/train.log:"; tail -5 "$dir/train.log" | sed 's/^/   /'
    failed=1
  elif ! grep -q '"val_loss"' "$dir/metrics.jsonl" 2>/dev/null; then
    echo "   FAILED: no val_loss in $dir/metrics.jsonl"; failed=1
  else
    echo "   done in $(( $(date +%s) - start )) s: $(grep -m1 '^step' "$dir/train.log" | awk '{print "loss", $4}') -> $(grep '^step' "$dir/train.log" | tail -1 | awk '{print $4}'), last val $(grep 'val_loss' "$dir/metrics.jsonl" | tail -1 | sed 's/.*"val_loss": *\([-0-9.eE+]*\).*/\1/')"
  fi
done

# One line per mode: mode, final val loss, median tokens/s, peak activation MiB ("-" when absent).
stats() {
  awk '
    function num(key,   v) {
      if (!match($0, "[{,] *\"" key "\": *-?[0-9][0-9.eE+-]*")) return ""
      v = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", v); return v + 0
    }
    { s = num("step"); v = num("val_loss"); t = num("tokens_per_s"); a = num("activations")
      if (v != "") val = v
      if (t != "" && s > 1) tps[++nt] = t
      if (t != "" && s == 1) first = t
      if (a != "" && (act == "" || a > act)) act = a }
    END {
      if (nt == 0 && first != "") tps[++nt] = first
      for (i = 2; i <= nt; i++) { x = tps[i]; for (j = i - 1; j >= 1 && tps[j] > x; j--) tps[j + 1] = tps[j]; tps[j + 1] = x }
      med = nt == 0 ? "-" : (nt % 2 ? tps[(nt + 1) / 2] : (tps[nt / 2] + tps[nt / 2 + 1]) / 2)
      print (val == "" ? "-" : val), med, (act == "" ? "-" : act)
    }' "$1" 2>/dev/null || echo "- - -"
}

ref_val=-; ref_tps=-; ref_act=-
if [ -s "$OUT/fp32/metrics.jsonl" ] && [[ " $MODES " == *" fp32 "* ]]; then
  read -r ref_val ref_tps ref_act < <(stats "$OUT/fp32/metrics.jsonl")
fi

rows=$OUT/.rows.tsv
: > "$rows"
for m in $MODES; do
  if [ -s "$OUT/$m/metrics.jsonl" ]; then read -r val tps act < <(stats "$OUT/$m/metrics.jsonl"); else val=- tps=- act=-; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$val" "$ref_val" "$(bound "$m")" "$tps" "$ref_tps" "$act" "$ref_act" \
    "$(tr '\n' ' ' <<<"$(grep -m1 '^precision:' "$OUT/$m/train.log" 2>/dev/null)")" >> "$rows"
done

# The table (markdown, columns padded so that it also reads as plain text).
awk -F'\t' '
  function ratio(a, b) { return (a == "-" || b == "-" || b == 0) ? "-" : sprintf("%.4f", a / b) }
  {
    m = $1; v = $2; rv = $3; b = $4
    val = v == "-" ? "-" : sprintf("%.4f", v)
    r = (m == "fp32" && v != "-") ? "1" : ratio(v, rv)
    if (m == "fp32") { bd = "reference"; res = v == "-" ? "FAILED" : "-" }
    else {
      bd = sprintf("within %g%%", b * 100)
      if (v == "-") res = "FAILED"
      else if (r == "-") res = "no fp32"
      else { d = v / rv - 1; res = (d <= b && d >= -b) ? "PASS" : "OUTSIDE" }
    }
    n++
    cell[n, 1] = m; cell[n, 2] = val; cell[n, 3] = r; cell[n, 4] = bd; cell[n, 5] = res
    cell[n, 6] = $5 == "-" ? "-" : sprintf("%.0f", $5); cell[n, 7] = (m == "fp32" && $5 != "-") ? "1" : ratio($5, $6)
    cell[n, 8] = $7 == "-" ? "-" : sprintf("%.1f", $7); cell[n, 9] = (m == "fp32" && $7 != "-") ? "1" : ratio($7, $8)
  }
  END {
    split("mode|final val loss|/ fp32|bound|result|tokens/s (median)|/ fp32|peak activations MiB|/ fp32", h, "|")
    for (c = 1; c <= 9; c++) { w[c] = length(h[c]); for (i = 1; i <= n; i++) if (length(cell[i, c]) > w[c]) w[c] = length(cell[i, c]) }
    line = "|"; sep = "|"
    for (c = 1; c <= 9; c++) {
      line = line sprintf(" %-" w[c] "s |", h[c])
      d = ""; for (k = 0; k < w[c]; k++) d = d "-"
      sep = sep (c == 1 || c == 4 || c == 5 ? ":" d "-" : "-" d ":") "|"
    }
    print line; print sep
    for (i = 1; i <= n; i++) {
      line = "|"
      for (c = 1; c <= 9; c++) line = line sprintf((c == 1 || c == 4 || c == 5) ? " %-" w[c] "s |" : " %" w[c] "s |", cell[i, c])
      print line
    }
  }' "$rows" > "$OUT/.table.md"

{
  echo "# Precision comparison: configs/llama3_debug.toml, $STEPS steps"
  echo
  echo "Checkout $commit$dirty, binary $BIN (copied to ctitan.bin); validation every $VAL_FREQ steps and at the last step" \
       "(validation.steps from the config); $OMP_NUM_THREADS OpenMP threads, one process; $(date -u +%Y-%m-%dT%H:%MZ)."
  [ $# -gt 0 ] && echo "Extra arguments: \`$*\`."
  echo "Bound: the final validation loss within 1% (bf16) or 3% (8-bit modes) of fp32's, either side." \
       "tokens/s: median over steps 2..$STEPS. Peak activations: max of memory_peak_mib.activations."
  echo
  cat "$OUT/.table.md"
  echo
  echo "Precision line of each run:"
  echo
  awk -F'\t' '{ sub(/ +$/, "", $9); printf "- %s: `%s`\n", $1, ($9 == "" ? "(none: the run failed?)" : $9) }' "$rows"
  echo
  echo "Loss curves: ![loss curves](loss_curves.svg)"
} > "$OUT/summary.md"

# Each run is named by its folder, the mode; the first one present (fp32 by default) is the
# reference of the difference panel.
runs=()
rm -f "$OUT/loss_curves.svg"
for m in $MODES; do [ -s "$OUT/$m/metrics.jsonl" ] && grep -q '"loss"' "$OUT/$m/metrics.jsonl" && runs+=("$OUT/$m/metrics.jsonl"); done
if [ ${#runs[@]} -gt 0 ]; then
  "$OUT/ctitan.bin" plot "${runs[@]}" --out "$OUT/loss_curves.svg" --diff --smooth 10 \
    --title "Training loss by precision: llama3 debugmodel, $STEPS steps" >/dev/null || failed=1
fi

echo
cat "$OUT/.table.md"
echo
awk -F'\t' '{ sub(/ +$/, "", $9); printf "%-18s %s\n", $1 ":", ($9 == "" ? "(no precision line)" : $9) }' "$rows"
echo
echo "summary: $OUT/summary.md$([ -s "$OUT/loss_curves.svg" ] && echo "   loss curves: $OUT/loss_curves.svg")"
rm -f "$rows" "$OUT/.table.md"
[ $failed -eq 0 ] || { echo "precision_compare: a run failed" >&2; exit 1; }
