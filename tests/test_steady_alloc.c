// A steady training step makes no heap allocation, the libraries' included: the
// malloc family is interposed (heap_count.h, as bench/bench_train.c does), so every call in the process
// counts -- ctitan's, libgomp's, oneDNN's, MPI's. (oneDNN 2.x builds each matmul execution's
// argument map with operator new; ctitan serves those calls from a buffer it owns,
// kernels/cpu/onednn_arena.h, and the calls made inside oneDNN's execution are counted apart
// only to say where a regression comes from: they too must be none.) A tiny trainer runs two
// warm-up steps (first touch, per-thread gemm buffers, oneDNN primitives, the OpenMP team), then
// two steps that must make no call at all, in each precision: fp32, bf16, float8 tensorwise,
// float8 rowwise, MXFP8, bf16 with the fused kernels and full activation checkpointing, and, on
// a CPU with bf16 units, bf16 through oneDNN's matmul primitives (the path AMX machines take;
// where this CPU runs ctitan's own AVX-512 BF16 kernel, that is set aside for the case).
//
// The shapes are chosen so that both sides of every parallel threshold run: token matrices of
// 256 x 128 and weights of 384 x 128 take the kernels' serial loops, 256 x 384 and the gemms
// their parallel ones. (The regression this guards: `#pragma omp parallel for if (small)` --
// libgomp allocates and frees a team for every region that runs on one thread, ~25 calls a step
// under the 8-bit recipes.) Counts, not timings: deterministic.
//
// Two threads, whatever OMP_NUM_THREADS says, and then one (the layout of one MPI rank per core):
// libgomp caches a team of several threads between regions but allocates a team of one for
// every region, so with one thread the kernels' regions run inline (kernels/cpu/omp_inline.c).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/memory.h"
#include "heap_count.h"
#include "kernels/cpu/gemm_bf16.h"
#include "test.h"
#include "train/trainer.h"

// ---- every malloc-family call in the process passes through here (heap_count.h)
// Calls made while oneDNN executes a bf16 matmul (ct_gemm_bf16_in_onednn, any thread) are counted
// apart, to name the culprit when one appears; both counts must stay zero.
static long alloc_calls, onednn_calls;  // updated atomically: the calls may come from any thread
static void heap_call_counted(void) {
    if (__atomic_load_n(&ct_gemm_bf16_in_onednn, __ATOMIC_RELAXED)) __atomic_fetch_add(&onednn_calls, 1, __ATOMIC_RELAXED);
    else __atomic_fetch_add(&alloc_calls, 1, __ATOMIC_RELAXED);
}
static long calls_now(void) { return __atomic_load_n(&alloc_calls, __ATOMIC_RELAXED); }
static long onednn_now(void) { return __atomic_load_n(&onednn_calls, __ATOMIC_RELAXED); }

#define WARMUP 2
#define STEADY 2

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("test", "%s", ct_last_error());
}

// Trains the tiny model with these extra settings; returns the heap calls (and, through
// *ct_bufs, ctitan's buffer allocations) over the STEADY steps after WARMUP, -1 if init failed.
static long steady_calls(const char *what, const char *kv[][2], int n, long *ct_bufs) {
    ct_config c;
    ct_config_defaults(&c);
    const char *base[][2] = {
        {"model.n_layers", "2"},       {"model.dim", "128"},          {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},     {"model.ffn_hidden_dim", "384"}, {"model.vocab_size", "1024"},
        {"micro_batch_size", "4"},     {"training.seq_len", "64"},    {"training.dataset", "synthetic"},
        {"training.steps", "100"},     {"lr_scheduler.warmup_steps", "2"}, {"metrics.peak_tflops", "1"},
        {"training.seed", "7"},
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) set(&c, base[i][0], base[i][1]);
    for (int i = 0; i < n; i++) set(&c, kv[i][0], kv[i][1]);
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "%s: init: %s", what, ct_last_error());
        return -1;
    }
    for (int i = 0; i < WARMUP; i++) ct_trainer_step(&t);
    long calls0 = calls_now(), ct0 = ct_mem_alloc_count(), lib0 = onednn_now();
    for (int i = 0; i < STEADY; i++) ct_trainer_step(&t);
    long calls = calls_now() - calls0, lib = onednn_now() - lib0;
    *ct_bufs = ct_mem_alloc_count() - ct0;
    if (lib) printf("  %s: %ld heap calls inside oneDNN's matmul execution (%s path) in %d steps\n", what, lib,
                    ct_bf16_gemm_path(), STEADY);
    calls += lib;
    CHECK(t.last.loss > 0 && t.last.loss < 100, "%s: loss %g after %d steps", what, t.last.loss, t.step);
    ct_trainer_free(&t);
    return calls;
}

static void expect_none(const char *what, const char *kv[][2], int n) {
    long bufs = 0, calls = steady_calls(what, kv, n, &bufs);
    if (calls < 0) return;
    CHECK(calls == 0 && bufs == 0, "%s: %ld heap calls, %ld ctitan buffers in %d steady steps", what, calls, bufs,
          STEADY);
}

// The interposition works: a call from here, and the trainer's set-up, are counted.
static void counting_works(void) {
    long c0 = calls_now();
    void *volatile p = malloc(16);
    free(p);
    CHECK(calls_now() - c0 == 1, "malloc not counted (%ld)", calls_now() - c0);
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.n_layers", "1");
    set(&c, "model.dim", "64");
    set(&c, "model.n_heads", "2");
    set(&c, "model.n_kv_heads", "2");
    set(&c, "model.ffn_hidden_dim", "128");
    set(&c, "model.vocab_size", "256");
    set(&c, "training.seq_len", "16");
    set(&c, "training.dataset", "synthetic");
    set(&c, "metrics.peak_tflops", "1");
    static ct_trainer t;
    c0 = calls_now();
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(calls_now() - c0 > 0, "the trainer's set-up made no counted call");
    ct_trainer_free(&t);
}

static void fp32(void) { expect_none("fp32", NULL, 0); }

static void bf16(void) {
    const char *kv[][2] = {{"mixed_precision", "bf16"}};
    expect_none("bf16", kv, 1);
}

static void float8_tensorwise(void) {
    const char *kv[][2] = {{"mixed_precision", "bf16"}, {"quantization.float8.enable", "true"}};
    expect_none("float8 tensorwise", kv, 2);
}

static void float8_rowwise(void) {
    const char *kv[][2] = {{"mixed_precision", "bf16"},
                           {"quantization.float8.enable", "true"},
                           {"quantization.float8.recipe", "rowwise"}};
    expect_none("float8 rowwise", kv, 3);
}

static void mxfp8(void) {
    const char *kv[][2] = {{"mixed_precision", "bf16"}, {"quantization.mxfp8.enable", "true"}};
    expect_none("mxfp8", kv, 2);
}

static void bf16_compile_full_ac(void) {
    const char *kv[][2] = {{"mixed_precision", "bf16"}, {"compile.enable", "true"}, {"activation_checkpoint.mode", "full"}};
    expect_none("bf16 compile full AC", kv, 3);
}

// Where the CPU has bf16 units, bf16 matmuls through oneDNN's primitives; elsewhere no oneDNN
// call is made by a training step at all (the fallback widens to fp32), and test_onednn_arena
// checks the buffer through oneDNN's fp32 test primitive.
static void bf16_through_onednn(void) {
    if (strcmp(ct_bf16_gemm_path(), "fallback") == 0) {
        printf("  no bf16 units here (%s path): training steps make no oneDNN call\n", ct_bf16_gemm_path());
        return;
    }
    ct_gemm_bf16_prefer_onednn(1);
    const char *kv[][2] = {{"mixed_precision", "bf16"}};
    expect_none("bf16 through oneDNN", kv, 1);
    ct_gemm_bf16_prefer_onednn(0);
}

// One thread (OMP_NUM_THREADS=1, one rank per core): libgomp would allocate and free a team of
// one for each of the kernels' parallel regions (about 35 per step here); they run inline, and
// the compiled path (its fused kernels hand out blocks with a counter, not schedule(dynamic),
// which allocates a work share without a team) makes no call either.
static void one_thread(void) {
    omp_set_num_threads(1);
    expect_none("fp32, one thread", NULL, 0);
    const char *kv[][2] = {{"mixed_precision", "bf16"}, {"compile.enable", "true"}, {"activation_checkpoint.mode", "selective"}};
    expect_none("bf16 compile selective AC, one thread", kv, 3);
    omp_set_num_threads(2);
}

int main(int argc, char **argv) {
    heap_counting_start();
    omp_set_num_threads(2);
    if (ct_comm_init(&argc, &argv)) return 1;
    CT_RUN(counting_works);
    CT_RUN(fp32);
    CT_RUN(bf16);
    CT_RUN(float8_tensorwise);
    CT_RUN(float8_rowwise);
    CT_RUN(mxfp8);
    CT_RUN(bf16_compile_full_ac);
    CT_RUN(bf16_through_onednn);
    CT_RUN(one_thread);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
