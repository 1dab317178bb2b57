#!/usr/bin/env bash
# Runs the benchmark programs (make bench). Each prints what it measured beside its reference.
# Timings on a shared machine are noisy: run twice and keep the best.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
build/bench/bench_matmul
# How long the threads of a product wait for one another at its end, at bench S's shapes.
build/bench/bench_gemm_team
build/bench/bench_matmul_bf16
build/bench/bench_attention
build/bench/bench_attention bf16
# Fused forward chains (--compile.enable) against the unfused calls, at S and M block shapes.
build/bench/bench_fused
build/bench/bench_tokenizer
build/bench/bench_train S
build/bench/bench_train M 3
# Fused kernels (--compile.enable) side by side with the runs above: the step-time ratio is
# the S / M line above divided by these.
build/bench/bench_train S 6 compile.enable=true
build/bench/bench_train M 3 compile.enable=true
# Mixed precision side by side: bf16 (AMX / AVX-512 BF16 where the CPU has them, an fp32
# fallback elsewhere: the log line says which) and the 8-bit recipes on top of it.
build/bench/bench_train S 6 mixed_precision=bf16
build/bench/bench_train S 4 mixed_precision=bf16 quantization.float8.enable=true
build/bench/bench_train S 4 mixed_precision=bf16 quantization.mxfp8.enable=true
build/bench/bench_train M 3 mixed_precision=bf16
ROOT=""; [ "$(id -u)" -eq 0 ] && ROOT="--allow-run-as-root"
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np 4 build/bench/bench_fsdp_comm
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np 4 build/bench/bench_tp
# Async communication: time ranks wait for communication and step time, FSDP prefetch and
# deferred reduce-scatters against blocking, as ratios (FSDP 4, FSDP 2 x tp 2; debug model dims).
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np 4 build/bench/bench_async
# Context parallel: per-rank attention work with and without head-tail balancing (thread CPU time,
# so oversubscribed ranks still compare their own work) and bytes per rotate method vs analytic.
OMP_NUM_THREADS=1 mpirun $ROOT --bind-to none -np 2 build/bench/bench_cp
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np 4 build/bench/bench_cp
# Pipeline bubble: one thread per rank and as many ranks as cores (2), so idle time is waiting,
# not a rank starved of its core; then activation memory at pp 4 (4 ranks; timing not used).
OMP_NUM_THREADS=1 mpirun $ROOT --bind-to none -np 2 build/bench/bench_pipeline
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np 4 build/bench/bench_pipeline memory
bench/cp_memory.sh 4096 ring
# Activation checkpointing: memory and step time per policy, as ratios to none.
bench/ac_memory.sh 3
# Checkpoints: save / load MB/s per rank and the training pause, synchronous against async.
BUILD=build bash bench/checkpoint_speed.sh
# Profiling: a profiled step's time against an unprofiled one (pairs), and the cost of a span.
build/bench/bench_profile 20
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np 4 build/bench/bench_profile 20 \
  parallelism.data_shard_degree=2 parallelism.compute_parallel_degree=2
