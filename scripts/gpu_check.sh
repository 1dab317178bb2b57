#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU, within 10 minutes:
#   1. build with CUDA=1 for the GPU at hand (or, with PREBUILT=1, use $BUILD's binaries made
#      elsewhere with the same CUDA: scripts/gpu_bundle.sh);
#   2. the GPU tests (tests/cuda: every cuda kernel against the cpu backend, the float8 / MXFP8
#      quantisation and matmuls and the gathered cross-entropy rows included) and the matmul
#      rates through the cuda table: cuBLASLt bf16 and fp32, the fp8 product (gemm_f8) and MXFP8's;
#   3. the trainer on the GPU: the debug model, 20 steps, on cuda against the same run on the cpu
#      in fp32 (the losses must agree to accumulation order); when the cuda run does not finish,
#      its first step again under compute-sanitizer (where the machine allows it);
#   4. a Llama 3 ~1B run (dim 2048, 16 layers, seq 2048, bf16) for tokens/s and MFU;
#   5. the debug model's parity again in bf16, and in fp32 with head size 64 (the tiled
#      attention kernels; the debug model's own heads are 16 wide);
#   6. the debug model with float8 (tensorwise, rowwise) and MXFP8 linears, 6 steps each: the
#      8-bit kernels in a training step, cuda against cpu.
# Logs go under $OUT when set (else outputs/gpu_check), at most 8 files; runs' dump folders
# under $WORK (/tmp/ctitan_gpu_check): the ~1B run's exported model is 5 GB.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-outputs/gpu_check}
work=${WORK:-/tmp/ctitan_gpu_check}
mkdir -p "$out" "$work"
B=${BUILD:-build-cuda}
log() { echo "$@" | tee -a "$out/summary.txt"; }
: >"$out/summary.txt"
log "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader 2>&1 | head -1)"

mkdir -p "$B" && touch "$B/.setup-done"
t0=$SECONDS
# One architecture for the device at hand keeps the build short; sm_90 = H100/H200.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
gencode="-gencode=arch=compute_${cc:-90},code=sm_${cc:-90}"
if [ "${PREBUILT:-0}" = 1 ]; then
  log "build: prebuilt $B/ctitan and $B/tests/cuda/test_cuda_kernels"
elif ! timeout 420 make CUDA=1 BUILD="$B" CUDA_GENCODE="$gencode" -j"$(nproc)" "$B/ctitan" \
     "$B/tests/cuda/test_cuda_kernels" >"$work/build.log" 2>&1; then
  log "BUILD FAILED after $((SECONDS - t0))s:"; grep -E ' error|undefined' "$work/build.log" | head -5 | tee -a "$out/summary.txt"
  exit 1
else
  log "build: $((SECONDS - t0))s ($gencode)"
fi

# make test-cuda's loop, run directly so that a prebuilt tree is not rebuilt.
t0=$SECONDS
rc=0
for t in "$B"/tests/cuda/test_*; do
  echo "== $t" >>"$out/test-cuda.log"; timeout 120 "$t" >>"$out/test-cuda.log" 2>&1 || rc=1
done
log "test-cuda: exit $rc in $((SECONDS - t0))s, $(grep -c '^PASS' "$out/test-cuda.log") PASS, $(grep -c '^FAIL' "$out/test-cuda.log") FAIL"
grep -E '^FAIL|check failed|SKIP|rror' "$out/test-cuda.log" | head -20 | tee -a "$out/summary.txt"

# Matmul rates; MFU denominators: H100/H200 SXM dense bf16 989 TFLOP/s, fp32 67 (datasheets).
timeout 60 "$B/tests/cuda/test_cuda_kernels" --peak 8192 2>&1 | tee -a "$out/summary.txt"

# One-GPU parity: the debug model, synthetic tokens, 20 steps, a step line each, cuda and cpu.
common=(--config configs/llama3_debug.toml --training.dataset synthetic --training.steps 20 --metrics.log_freq 1
        --validation.enable false --checkpoint.enable false --job.overwrite true)
parity() {  # parity NAME [flags...]: the run on cuda (log under $out) and on the cpu (log under $work)
  local name=$1; shift
  local t1=$SECONDS
  timeout 60 "$B/ctitan" train "${common[@]}" "$@" --training.device cuda --job.dump_folder "$work/${name}_cuda" \
    >"$out/${name}_cuda.log" 2>&1
  local rc_cuda=$? t2=$SECONDS
  timeout 60 "$B/ctitan" train "${common[@]}" "$@" --training.device cpu --job.dump_folder "$work/${name}_cpu" \
    >"$work/${name}_cpu.log" 2>&1
  log "$name (exit cuda $rc_cuda in $((t2 - t1))s, cpu $? in $((SECONDS - t2))s): step, loss cuda, loss cpu"
  paste <(grep '^step' "$out/${name}_cuda.log" | awk '{print $2, $4}') <(grep '^step' "$work/${name}_cpu.log" | awk '{print $4}') |
    tee -a "$out/summary.txt"
  grep -iE 'error|fatal|refus|abort' "$out/${name}_cuda.log" | head -3 | tee -a "$out/summary.txt"
  return $rc_cuda
}
if ! parity parity_fp32 && command -v compute-sanitizer >/dev/null; then
  timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$B/ctitan" train "${common[@]}" --training.steps 1 \
    --training.device cuda --job.dump_folder "$work/memcheck" >"$out/memcheck.log" 2>&1
  log "memcheck of one cuda step (exit $?):"; grep -E 'ERROR SUMMARY|Invalid|at 0x|by thread' "$out/memcheck.log" | head -8 |
    tee -a "$out/summary.txt"
fi
# Llama 3 ~1B on the GPU, bf16: tokens/s and MFU from the step lines (the first steps warm up).
timeout 150 "$B/ctitan" train --config configs/llama3_debug.toml --training.dataset synthetic --training.device cuda \
  --mixed_precision bf16 --model.dim 2048 --model.n_layers 16 --model.n_heads 32 --model.n_kv_heads 8 \
  --model.vocab_size 128256 --training.seq_len 2048 --micro_batch_size 4 --training.steps 12 --metrics.log_freq 1 \
  --validation.enable false --checkpoint.enable false --job.overwrite true --job.dump_folder "$work/llama1b" \
  >"$out/llama1b.log" 2>&1
log "llama ~1B bf16 (exit $?):"; grep -E '^(model|precision|step)|rror|fatal' "$out/llama1b.log" | tail -8 | tee -a "$out/summary.txt"
parity parity_bf16 --mixed_precision bf16
# Head size 64 (4 heads of 256; 2 kv heads): the tiled attention kernels, with grouped heads.
parity parity_hs64 --model.n_heads 4 --model.n_kv_heads 2
# 8-bit linears: the same codes and scales on both devices, sums in another order.
parity parity_f8 --training.steps 6 --quantization.float8.enable true
parity parity_f8_rowwise --training.steps 6 --quantization.float8.enable true --quantization.float8.recipe rowwise
parity parity_mxfp8 --training.steps 6 --quantization.mxfp8.enable true
exit $rc
