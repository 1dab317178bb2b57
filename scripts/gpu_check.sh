#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: build with CUDA=1,
# run the GPU tests (make test-cuda: every cuda kernel against the cpu backend), then measure
# cuBLASLt's bf16 and fp32 matmul rates through the cuda table. Writes everything under $OUT
# when set (else outputs/gpu_check). Budget: about 10 minutes (build ~3-5 min on 16 cores).
# Then the trainer on the GPU: a 20-step debug run on cuda against the same run on the cpu (the
# step lines' losses side by side, the first must agree to fp32 accumulation order), and a Llama 3
# ~1B run (dim 2048, 16 layers, seq 2048, bf16) for tokens/s and MFU.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-outputs/gpu_check}
mkdir -p "$out"
B=${BUILD:-build-cuda}
log() { echo "$@" | tee -a "$out/summary.txt"; }
: >"$out/summary.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$out/nvidia-smi.txt" 2>&1
log "gpu: $(sed -n 2p "$out/nvidia-smi.txt")"

mkdir -p "$B" && touch "$B/.setup-done"
t0=$SECONDS
# One architecture for the device at hand keeps the build short; sm_90 = H100/H200.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
gencode="-gencode=arch=compute_${cc:-90},code=sm_${cc:-90}"
if ! timeout 420 make CUDA=1 BUILD="$B" CUDA_GENCODE="$gencode" -j"$(nproc)" "$B/ctitan" \
     "$B/tests/cuda/test_cuda_kernels" >"$out/build.log" 2>&1; then
  log "BUILD FAILED after $((SECONDS - t0))s (see build.log):"; grep -E ' error|undefined' "$out/build.log" | head -5 | tee -a "$out/summary.txt"
  exit 1
fi
log "build: $((SECONDS - t0))s ($gencode)"

t0=$SECONDS
timeout 240 make CUDA=1 BUILD="$B" CUDA_GENCODE="$gencode" test-cuda >"$out/test-cuda.log" 2>&1
rc=$?
log "test-cuda: exit $rc in $((SECONDS - t0))s, $(grep -c '^PASS' "$out/test-cuda.log") PASS, $(grep -c '^FAIL' "$out/test-cuda.log") FAIL"
grep -E '^FAIL|check failed|SKIP' "$out/test-cuda.log" | head -20 | tee -a "$out/summary.txt"

# Matmul rates; MFU denominators: H100/H200 SXM dense bf16 989 TFLOP/s, fp32 67 (datasheets).
timeout 120 "$B/tests/cuda/test_cuda_kernels" --peak 8192 2>&1 | tee -a "$out/summary.txt"

# One-GPU parity: the debug model, synthetic tokens, 20 steps, fp32, on cuda and on the cpu.
common=(--config configs/llama3_debug.toml --training.dataset synthetic --training.steps 20
        --validation.enable false --checkpoint.enable false --job.overwrite true)
timeout 150 "$B/ctitan" train "${common[@]}" --training.device cuda --job.dump_folder "$out/parity_cuda" \
  >"$out/parity_cuda.log" 2>&1
timeout 150 "$B/ctitan" train "${common[@]}" --training.device cpu --job.dump_folder "$out/parity_cpu" \
  >"$out/parity_cpu.log" 2>&1
paste <(grep '^step' "$out/parity_cuda.log" | awk '{print $2, $4}') <(grep '^step' "$out/parity_cpu.log" | awk '{print $4}') \
  >"$out/parity.txt"
log "parity (step, loss cuda, loss cpu):"; tee -a "$out/summary.txt" <"$out/parity.txt"
grep -iE 'error|fatal|refus' "$out/parity_cuda.log" | head -3 | tee -a "$out/summary.txt"

# Llama 3 ~1B on the GPU, bf16: tokens/s and MFU from the step lines (the first steps warm up).
timeout 240 "$B/ctitan" train --config configs/llama3_debug.toml --training.dataset synthetic --training.device cuda \
  --mixed_precision bf16 --model.dim 2048 --model.n_layers 16 --model.n_heads 32 --model.n_kv_heads 8 \
  --model.vocab_size 128256 --training.seq_len 2048 --micro_batch_size 4 --training.steps 12 \
  --validation.enable false --checkpoint.enable false --job.overwrite true --job.dump_folder "$out/llama1b" \
  >"$out/llama1b.log" 2>&1
log "llama ~1B bf16 (exit $?):"; grep -E '^step|error|fatal' "$out/llama1b.log" | tail -4 | tee -a "$out/summary.txt"
exit $rc
