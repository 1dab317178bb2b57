// bf16 matmul: on CPUs with bf16 units through ctitan's own kernels (gemm_bf16_avx512.c: AMX
// tiles where the CPU has them and Linux grants them, gemm_bf16_amx.c; VDPBF16PS otherwise);
// oneDNN's matmul primitive (created once per shape, kept in a small cache) where this build
// lacks them, and for tests; elsewhere a fallback that widens the inputs to fp32 and calls
// ct_gemm. oneDNN's own heap calls inside an execution come from ctitan's buffer (onednn_arena.h).
// Contracts in gemm_bf16.h.
//
// Why a primitive and not a gemm call: oneDNN 2.6 (Debian's) has no bf16 counterpart of
// dnnl_sgemm in its C API that reaches the AMX kernels; the matmul primitive does, but creating
// one costs far more than a small matmul (JIT code generation), hence the cache.
//
// Layouts: op(A) (M, K), op(B) (K, N) and C (M, N) are described by strides, so transposes and
// leading dimensions cost nothing: op(A)[m][k] is A[m*lda + k], or A[k*lda + m] when trans_a.
// alpha is a run-time output scale (one primitive serves every alpha != 1); beta is a sum
// post-op with scale 1, C being scaled by beta first when beta is neither 0 nor 1, so the key
// holds only beta != 0.
#include "kernels/cpu/gemm_bf16.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/mathutil.h"
#include "core/memory.h"
#include "kernels/cpu/onednn_arena.h"
#include "kernels/kernels.h"

// The scalar conversions are core/float_formats.h's (round to nearest even, NaN kept quiet); the
// arrays here are the parallel versions the kernels want.

static inline uint16_t f32_to_bf16(float f) { return ct_f32_to_bf16(f); }
static inline float bf16_to_f32(uint16_t h) { return ct_bf16_to_f32(h); }

// (Small arrays take a plain loop rather than `parallel for if (...)`: a region that the clause
// makes serial still has a team of one, which libgomp allocates and frees on every call.)
#define CT_BF16_PARALLEL_MIN 65536

void ct_f32_to_bf16_array(uint16_t *dst, const float *src, long n) {
    if (n > CT_BF16_PARALLEL_MIN) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
    } else {
        for (long i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
    }
}

void ct_bf16_to_f32_array(float *dst, const uint16_t *src, long n) {
    if (n > CT_BF16_PARALLEL_MIN) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
    } else {
        for (long i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
    }
}

// ---------------------------------------------------------------- state (under g_mu)
enum { CACHE_SIZE = 64 };  // the model has ~10 distinct shapes per micro-batch size; room for several

typedef struct {
    long M, N, K, lda, ldb, ldc;
    int ta, tb, has_beta, has_alpha, f32;  // f32: the test mode's fp32 primitive
    unsigned long used;                    // LRU tick; 0 = empty slot
    long runs;                             // executions so far
    dnnl_primitive_t prim;                 // NULL in a used slot: no fast kernel, fall back
    dnnl_memory_t a, b, c, scale, scratch;
    int scratch_user;
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static const char *g_path = "fallback";
static int g_native;  // the avx512_bf16 path runs ctitan's kernel (gemm_bf16_avx512.c), not oneDNN
static entry g_cache[CACHE_SIZE];
static unsigned long g_tick;
static long g_created;
static int g_user_scratchpad = 1, g_test_f32;
static void *g_scratch;  // shared user scratchpad (one call at a time holds it)
static size_t g_scratch_bytes;
static float *g_wide;  // fallback / test-mode widened inputs (grown, reused)
static size_t g_wide_floats;

static void check(dnnl_status_t st, const char *what) {
    if (st != dnnl_success) ct_fatal("ct_gemm_bf16", "%s failed (oneDNN status %d)", what, (int)st);
}

static void destroy_entry(entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    dnnl_memory_t *mems[] = {&e->a, &e->b, &e->c, &e->scale, &e->scratch};
    for (int i = 0; i < 5; i++)
        if (*mems[i]) dnnl_memory_destroy(*mems[i]);
    memset(e, 0, sizeof *e);
}

// Creates the primitive for one key, or leaves e->prim NULL when oneDNN has none for it or only
// its reference kernel (slower than widening to fp32 and running sgemm), outside the test mode.
static void create_entry(entry *e) {
    dnnl_data_type_t dt = e->f32 ? dnnl_f32 : dnnl_bf16;
    dnnl_dims_t ad = {e->M, e->K}, bd = {e->K, e->N}, cd = {e->M, e->N}, one = {1};
    dnnl_dims_t as = {e->ta ? 1 : e->lda, e->ta ? e->lda : 1};
    dnnl_dims_t bs = {e->tb ? 1 : e->ldb, e->tb ? e->ldb : 1};
    dnnl_dims_t cs = {e->ldc, 1};
    dnnl_memory_desc_t amd, bmd, cmd, smd;
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs) != dnnl_success)
        return;  // strides oneDNN refuses (ld below the width): the fallback handles any ld
    check(dnnl_memory_desc_init_by_strides(&smd, 1, one, dnnl_f32, one), "scale desc");
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd) != dnnl_success) return;

    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attr");
    if (e->scratch_user) check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratch");
    if (e->has_alpha) {
        float rt = DNNL_RUNTIME_F32_VAL;
        check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &rt), "output scales");
    }
    if (e->has_beta) {
        dnnl_post_ops_t po;
        check(dnnl_post_ops_create(&po), "post ops");
        check(dnnl_post_ops_append_sum(po, 1.0f), "sum post op");
        check(dnnl_primitive_attr_set_post_ops(attr, po), "set post ops");
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return;
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!e->f32 && strncmp(impl, "ref", 3) == 0) {
        dnnl_primitive_desc_destroy(pd);
        return;
    }
    check(dnnl_primitive_create(&e->prim, pd), "primitive");
    g_created++;
    check(dnnl_memory_create(&e->a, &amd, g_engine, DNNL_MEMORY_NONE), "memory A");
    check(dnnl_memory_create(&e->b, &bmd, g_engine, DNNL_MEMORY_NONE), "memory B");
    check(dnnl_memory_create(&e->c, &cmd, g_engine, DNNL_MEMORY_NONE), "memory C");
    check(dnnl_memory_create(&e->scale, &smd, g_engine, DNNL_MEMORY_NONE), "memory scale");
    if (e->scratch_user) {
        const dnnl_memory_desc_t *spd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        size_t bytes = spd ? dnnl_memory_desc_get_size(spd) : 0;
        if (bytes > 0) {
            check(dnnl_memory_create(&e->scratch, spd, g_engine, DNNL_MEMORY_NONE), "memory scratchpad");
            if (bytes > g_scratch_bytes) {  // grow at creation only; every entry re-points per call
                ct_mem_free(g_scratch);
                g_scratch = ct_mem_alloc(CT_MEM_OTHER, bytes);
                g_scratch_bytes = bytes;
            }
        }
    }
    dnnl_primitive_desc_destroy(pd);
}

// The cache slot for this key: found, or created in an empty or the least recently used slot.
static entry *lookup(long M, long N, long K, int ta, int tb, long lda, long ldb, long ldc, int has_alpha,
                     int has_beta) {
    entry *victim = &g_cache[0];
    for (int i = 0; i < CACHE_SIZE; i++) {
        entry *e = &g_cache[i];
        if (e->used && e->M == M && e->N == N && e->K == K && e->ta == ta && e->tb == tb && e->lda == lda &&
            e->ldb == ldb && e->ldc == ldc && e->has_alpha == has_alpha && e->has_beta == has_beta) {
            e->used = ++g_tick;
            return e;
        }
        if (e->used < victim->used) victim = e;
    }
    destroy_entry(victim);
    *victim = (entry){.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .ta = ta, .tb = tb,
                      .has_beta = has_beta, .has_alpha = has_alpha, .f32 = g_test_f32,
                      .scratch_user = g_user_scratchpad, .used = ++g_tick};
    create_entry(victim);
    return victim;
}

static void clear_cache(void) {
    for (int i = 0; i < CACHE_SIZE; i++) destroy_entry(&g_cache[i]);
}

static int native_wanted(void) { return strcmp(g_path, "fallback") != 0 && ct_gemm_bf16_avx512_available(); }

// The highest oneDNN ISA this kernel set may use: the level it was compiled for (kernel_set.h), so
// that a set below the CPU's best runs what a CPU of that level runs, oneDNN's calls included.
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define SET_ISA dnnl_cpu_isa_avx512_core_amx
#elif defined(__AVX512BF16__)
#define SET_ISA dnnl_cpu_isa_avx512_core_bf16
#elif defined(__AVX512F__)
#define SET_ISA dnnl_cpu_isa_avx512_core
#else
#define SET_ISA dnnl_cpu_isa_avx2
#endif

static void init_once(void) {
    // Caps oneDNN's own dispatch too; refused (harmlessly) when oneDNN has already run in this
    // process, e.g. under another kernel set: the mask below holds this set to its level anyway.
    (void)dnnl_set_max_cpu_isa(SET_ISA);
    check(dnnl_engine_create(&g_engine, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags), "stream");
    // The ISA masks nest (amx ⊃ avx512_core_bf16 ⊃ avx512_core ⊃ avx2), so & is the lower of two.
    // AVX-512 without BF16 gets only oneDNN's emulated bf16, no faster than fp32 sgemm, so it
    // takes the fallback.
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa() & (unsigned)SET_ISA;
    const char *p = (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx   ? "amx"
                    : (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ? "avx512_bf16"
                                                                                            : "fallback";
    if (strcmp(p, "fallback") != 0) {  // the ISA claims it: check that oneDNN builds a real kernel
        entry probe = {.M = 64, .N = 64, .K = 64, .lda = 64, .ldb = 64, .ldc = 64, .scratch_user = 1};
        create_entry(&probe);
        if (!probe.prim) p = "fallback";
        destroy_entry(&probe);
        g_created = 0;
        ct_mem_free(g_scratch);  // the probe's scratchpad; real shapes size their own
        g_scratch = NULL, g_scratch_bytes = 0;
    }
    g_path = p;
    // ctitan's kernels where the CPU has bf16 units: AMX tiles where Linux grants them, else
    // VDPBF16PS (oneDNN stays for the test mode's fp32 primitive and prefer_onednn)
    g_native = native_wanted();
}

const char *ct_bf16_gemm_path(void) {
    pthread_once(&g_once, init_once);
    return g_path;
}

// Widens the rows x cols region of a bf16 matrix with leading dimension ld into dst, keeping ld
// (the test mode hands the same strides to oneDNN) or packing it (ld_out = cols).
static void widen(float *dst, long ld_out, const uint16_t *src, long rows, long cols, long ld) {
    if (rows * cols > CT_BF16_PARALLEL_MIN && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++)
            for (long c = 0; c < cols; c++) dst[r * ld_out + c] = bf16_to_f32(src[r * ld + c]);
    } else {
        for (long r = 0; r < rows; r++)
            for (long c = 0; c < cols; c++) dst[r * ld_out + c] = bf16_to_f32(src[r * ld + c]);
    }
}

static float *wide_buffer(size_t floats) {  // under g_mu
    if (floats > g_wide_floats) {
        free(g_wide);
        g_wide = ct_xmalloc(floats * sizeof(float));
        g_wide_floats = floats;
    }
    return g_wide;
}

// C = alpha op(A) op(B) + beta C through ct_gemm on widened, packed copies. `shared`: use the
// reused buffer (caller holds g_mu); else allocate (a caller inside a parallel region).
static void gemm_fallback(int ta, int tb, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                          const uint16_t *B, long ldb, float beta, float *C, long ldc, int shared) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    size_t need = (size_t)(ar * ac + br * bc);
    float *w = shared ? wide_buffer(need) : ct_xmalloc(need * sizeof(float));
    widen(w, ac, A, ar, ac, lda);
    widen(w + ar * ac, bc, B, br, bc, ldb);
    ct_gemm(ta, tb, M, N, K, alpha, w, ac, w + ar * ac, bc, beta, C, ldc);
    if (!shared) free(w);
}

// Whether ctitan's own kernel takes this call (the leading dimensions it needs).
static int native_call(int trans_a, int trans_b, long M, long N, long K, long lda, long ldb, long ldc) {
    return g_native && !g_test_f32 && lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N;
}

size_t ct_gemm_bf16_packed_bytes(long K, long N) {
    pthread_once(&g_once, init_once);
    return g_native && !g_test_f32 ? ct_gemm_bf16_avx512_packed_bytes(K, N) : 0;
}

void ct_gemm_bf16_pack_b(int trans_b, long K, long N, const uint16_t *B, long ldb, void *dst) {
    if (!ct_gemm_bf16_packed_bytes(K, N)) ct_fatal("ct_gemm_bf16", "no packed B on the %s path", g_path);
    if (ldb < (trans_b ? K : N)) ct_fatal("ct_gemm_bf16", "pack_b: ldb %ld is shorter than a row of B", ldb);
    ct_gemm_bf16_avx512_pack_b(trans_b, K, N, B, ldb, dst);
}

void ct_gemm_bf16_packed(int trans_a, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                         const void *packed_b, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {  // no products: C = beta C
        ct_gemm(trans_a, 0, M, N, 0, alpha, NULL, 1, NULL, 1, beta, C, ldc);
        return;
    }
    if (!ct_gemm_bf16_packed_bytes(K, N)) ct_fatal("ct_gemm_bf16", "no packed B on the %s path", g_path);
    if (lda < (trans_a ? M : K) || ldc < N) ct_fatal("ct_gemm_bf16", "packed: lda %ld or ldc %ld too short", lda, ldc);
    ct_gemm_bf16_avx512_packed(trans_a, M, N, K, alpha, A, lda, packed_b, beta, C, ldc);
}

#define EPILOGUE_ROWS 32  // rows per epilogue call where the product runs first

// The epilogue on block b of EPILOGUE_ROWS rows of C (M, N), computed already.
static void epilogue_block(const ct_gemm_bf16_epilogue *epi, const float *C, long ldc, long M, long b) {
    long r0 = b * EPILOGUE_ROWS;
    epi->rows(epi->ctx, r0, ct_min_l(EPILOGUE_ROWS, M - r0), C + r0 * ldc, ldc);
}

void ct_gemm_bf16_epilogue_rows(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A,
                                long lda, const uint16_t *B, long ldb, const void *packed_b, float *C, long ldc,
                                const ct_gemm_bf16_epilogue *epi) {
    if (M <= 0 || N <= 0) return;
    pthread_once(&g_once, init_once);
    if (K > 0 && alpha != 0.0f && native_call(trans_a, trans_b, M, N, K, lda, ldb, ldc) &&
        ct_gemm_bf16_avx512_epilogue(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, packed_b, epi))
        return;
    if (packed_b) ct_gemm_bf16_packed(trans_a, M, N, K, alpha, A, lda, packed_b, 0.0f, C, ldc);
    else ct_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
    long nb = (M + EPILOGUE_ROWS - 1) / EPILOGUE_ROWS;
    if (omp_in_parallel()) {
        for (long b = 0; b < nb; b++) epilogue_block(epi, C, ldc, M, b);
        return;
    }
#pragma omp parallel for schedule(static)
    for (long b = 0; b < nb; b++) epilogue_block(epi, C, ldc, M, b);
}

void ct_gemm_bf16(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                  const uint16_t *B, long ldb, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {  // no products: C = beta C (ct_gemm reads neither A nor B)
        ct_gemm(trans_a, trans_b, M, N, 0, alpha, NULL, 1, NULL, 1, beta, C, ldc);
        return;
    }
    pthread_once(&g_once, init_once);
    if (native_call(trans_a, trans_b, M, N, K, lda, ldb, ldc)) {
        ct_gemm_bf16_avx512(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int fast = strcmp(g_path, "fallback") != 0 || g_test_f32;
    if (!fast && omp_in_parallel()) {  // stay parallel-safe without serialising on the mutex
        gemm_fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0);
        return;
    }
    pthread_mutex_lock(&g_mu);
    entry *e = fast ? lookup(M, N, K, !!trans_a, !!trans_b, lda, ldb, ldc, alpha != 1.0f, beta != 0.0f) : NULL;
    if (!e || !e->prim) {
        gemm_fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1);
        pthread_mutex_unlock(&g_mu);
        return;
    }
    if (beta != 0.0f && beta != 1.0f) {  // the sum post-op adds C with scale 1: pre-scale it
        if (M * N > CT_BF16_PARALLEL_MIN) {
#pragma omp parallel for schedule(static)
            for (long i = 0; i < M; i++)
                for (long j = 0; j < N; j++) C[i * ldc + j] *= beta;
        } else {
            for (long i = 0; i < M; i++)
                for (long j = 0; j < N; j++) C[i * ldc + j] *= beta;
        }
    }
    const void *a = A, *b = B;
    if (e->f32) {  // test mode: same strides, fp32 values
        long ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
        float *w = wide_buffer((size_t)(ar * lda + br * ldb));
        widen(w, lda, A, ar, ac, lda);
        widen(w + ar * lda, ldb, B, br, bc, ldb);
        a = w, b = w + ar * lda;
    }
    dnnl_memory_set_data_handle(e->a, (void *)a);
    dnnl_memory_set_data_handle(e->b, (void *)b);
    dnnl_memory_set_data_handle(e->c, C);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    int nargs = 3;
    if (e->has_alpha) {
        dnnl_memory_set_data_handle(e->scale, &alpha);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_OUTPUT_SCALES, e->scale};
    }
    if (e->scratch) {
        dnnl_memory_set_data_handle(e->scratch, g_scratch);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    __atomic_store_n(&ct_gemm_bf16_in_onednn, 1, __ATOMIC_SEQ_CST);
    // From the second execution of a primitive on, the execution's argument map comes from
    // ctitan's buffer (onednn_arena.h). The first runs outside it: oneDNN may generate kernels and
    // create other lasting objects then, which belong on the heap, not in a buffer meant for
    // blocks freed within the call.
    int window = e->runs++ > 0;
    if (window) ct_onednn_arena_enter();
    dnnl_status_t st = dnnl_primitive_execute(e->prim, g_stream, nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(g_stream);
    if (window) ct_onednn_arena_exit();
    __atomic_store_n(&ct_gemm_bf16_in_onednn, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&g_mu);
    if (st != dnnl_success)
        ct_fatal("ct_gemm_bf16", "matmul failed (status %d) for M=%ld N=%ld K=%ld lda=%ld ldb=%ld ldc=%ld", (int)st,
                 M, N, K, lda, ldb, ldc);
}

void ct_gemm_bf16_set_user_scratchpad(int user) {
    pthread_mutex_lock(&g_mu);
    clear_cache();
    g_user_scratchpad = !!user;
    pthread_mutex_unlock(&g_mu);
}

void ct_gemm_bf16_test_f32_primitive(int on) {
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_mu);
    clear_cache();
    g_test_f32 = !!on;
    pthread_mutex_unlock(&g_mu);
}

void ct_gemm_bf16_prefer_onednn(int on) {
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_mu);
    clear_cache();
    g_native = !on && native_wanted();
    pthread_mutex_unlock(&g_mu);
}

long ct_gemm_bf16_primitives_created(void) {
    pthread_mutex_lock(&g_mu);
    long n = g_created;
    pthread_mutex_unlock(&g_mu);
    return n;
}

double ct_cpu_matmul_peak_gflops_bf16(long n, int reps) {
    // Rows padded by 32 bf16 (64 bytes), for the reason peak.c pads the fp32 rows: a power-of-two
    // row length maps rows onto the same cache sets.
    long ld = n + 32;
    uint16_t *A = ct_xmalloc((size_t)n * ld * sizeof(uint16_t));
    uint16_t *B = ct_xmalloc((size_t)n * ld * sizeof(uint16_t));
    float *C = ct_xmalloc((size_t)n * ld * sizeof(float));
    for (long i = 0; i < n * ld; i++) {  // small values: no overflow, no denormals
        A[i] = f32_to_bf16((float)((i * 7) % 13) * 0.01f);
        B[i] = f32_to_bf16((float)((i * 5) % 11) * 0.01f);
    }
    ct_gemm_bf16(0, 0, n, n, n, 1.0f, A, ld, B, ld, 0.0f, C, ld);  // warm-up: primitive, JIT, pages
    double best = 0.0;
    for (int r = 0; r < (reps < 1 ? 1 : reps); r++) {
        double t0 = omp_get_wtime();
        ct_gemm_bf16(0, 0, n, n, n, 1.0f, A, ld, B, ld, 0.0f, C, ld);
        double g = 2.0 * (double)n * (double)n * (double)n / (omp_get_wtime() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(A);
    free(B);
    free(C);
    return best;
}
