// bf16 matmul on the CPU (kernels/cpu/gemm_bf16.c): bf16 inputs, fp32 accumulation and output.
// Internal to src/kernels (like kernels.h); code above kernels/ calls the table members
// gemm_bf16, matmul_peak_gflops_bf16, bf16_gemm_path, f32_to_bf16 and bf16_to_f32 in
// kernels/backend.h.
//
// bf16 values are passed as their raw bits (uint16_t): the top half of an fp32.
#ifndef CT_CPU_GEMM_BF16_H
#define CT_CPU_GEMM_BF16_H
#include <stddef.h>
#include <stdint.h>

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X^T when trans_x: the contract
// of ct_gemm, with A and B in bf16 and C in fp32 (beta == 0 overwrites C, NaN garbage included).
// Products are exact in fp32 and summed in fp32 (oneDNN's AMX kernels, ctitan's AVX-512 BF16
// kernel, or the fallback below), so the result is an fp32 gemm of the bf16 values.
//
// Threads: calls may come from any thread. ctitan's AVX-512 BF16 kernel takes no lock (each
// thread has its own buffers; inside a parallel region it runs on the calling thread). The
// oneDNN path holds one mutex around its primitive cache and shared scratchpad, so concurrent
// calls (e.g. from inside an OpenMP parallel region) run one at a time there. The fallback path
// takes the mutex too unless called inside a parallel region, where it allocates its own
// widened copies.
// Allocation: ctitan's kernel allocates its packing buffers once per thread, on that thread's
// first call, and nothing after. On the oneDNN path the first call with a new shape creates a
// primitive (and may grow the shared scratchpad); from a primitive's second execution on, the
// heap calls oneDNN makes inside it (its argument map) are served from ctitan's buffer
// (onednn_arena.h), so a repeated shape makes no heap call at all.
void ct_gemm_bf16(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                  const uint16_t *B, long ldb, float beta, float *C, long ldc);

// A step on whole rows of a product once they are final (ct_gemm_bf16_epilogue_rows): rows(ctx,
// r0, n, c, ldc) gets rows [r0, r0 + n) of the product, row r0 at c, rows ldc floats apart. It
// runs on the thread that multiplied those rows, calls for disjoint rows at the same time on the
// threads of the product's team, so it must not start a parallel region.
typedef struct {
    void (*rows)(void *ctx, long r0, long n, const float *c, long ldc);
    void *ctx;
} ct_gemm_bf16_epilogue;

// The product alpha op(A) @ op(B) (M, N), as ct_gemm_bf16 computes it (bit for bit), handed to
// the epilogue, every row exactly once. C (M, N) is room the product may go through; what it
// holds after is unspecified. On ctitan's AMX and AVX-512 BF16 kernel, where the product is one
// B panel and one K block (K up to 1024 or 2048, N up to the panel that K leaves room for), the
// thread that multiplies a block of rows (32 or 144) writes them to a buffer of its own and hands
// them over at once, from its cache: C is not touched. Elsewhere (other shapes, oneDNN, the
// fallback) the product is computed into C first, then the epilogue runs on blocks of rows over
// the threads, which costs what the two steps cost apart.
// packed_b: B packed beforehand (ct_gemm_bf16_pack_b, on a path that packs), read instead of B;
// NULL: B as it is.
void ct_gemm_bf16_epilogue_rows(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A,
                                long lda, const uint16_t *B, long ldb, const void *packed_b, float *C, long ldc,
                                const ct_gemm_bf16_epilogue *epi);

// A B operand packed once and multiplied many times: a weight that stays the same over the
// micro-batches of a step. ct_gemm_bf16_packed_bytes: the bytes op(B) (K, N) takes packed for
// this CPU's kernel, 0 where ct_gemm_bf16 has no packed form (oneDNN, the fallback: callers then
// call ct_gemm_bf16). ct_gemm_bf16_pack_b packs op(B) (trans_b, ldb as ct_gemm_bf16) into dst
// (that many bytes, 64-byte aligned); ct_gemm_bf16_packed computes ct_gemm_bf16(trans_a, trans_b,
// M, N, K, ..., B, ...) from it, bit for bit, without packing B again. A packing is for one
// shape and one kernel (a test's allow_amx): used for another it ends the process with a message.
size_t ct_gemm_bf16_packed_bytes(long K, long N);
void ct_gemm_bf16_pack_b(int trans_b, long K, long N, const uint16_t *B, long ldb, void *dst);
void ct_gemm_bf16_packed(int trans_a, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                         const void *packed_b, float beta, float *C, long ldc);

// Which units ct_gemm_bf16 uses on this CPU, decided once: "amx" (AMX tiles: ctitan's kernel,
// gemm_bf16_amx.c, when this build has it and Linux grants the tile state, else VDPBF16PS),
// "avx512_bf16" (AVX-512 BF16 dot products: ctitan's kernel, gemm_bf16_avx512.c), each through
// oneDNN when this build lacks ctitan's kernel, or "fallback" (inputs widened to fp32, then ct_gemm: correct
// everywhere, fp32 speed or a little less). On the oneDNN paths a shape oneDNN only offers
// through its reference kernel also falls back, silently: see DNNL_VERBOSE=1 for the kernel per
// shape. (The names stay these three: logs and tests match them.)
const char *ct_bf16_gemm_path(void);

// dst[i] = src[i] rounded to the nearest bf16, ties to even; NaN stays NaN (quiet), overflow
// rounds to infinity as IEEE rounding does. Parallel (OpenMP) for large n.
void ct_f32_to_bf16_array(uint16_t *dst, const float *src, long n);
// dst[i] = the fp32 value of bf16 src[i] (exact). Parallel for large n.
void ct_bf16_to_f32_array(float *dst, const uint16_t *src, long n);

// Best GFLOP/s of an n×n×n ct_gemm_bf16 over `reps` runs (after a warm-up that creates the
// primitive): the bf16 peak a mixed-precision MFU divides by. Set-up code: allocates.
double ct_cpu_matmul_peak_gflops_bf16(long n, int reps);

// ---- knobs for tests and the bench (call while no gemm runs; each empties the cache)
// user != 0: one scratchpad buffer owned here, shared by every cached primitive (the default);
// 0: oneDNN manages it per primitive (library mode).
void ct_gemm_bf16_set_user_scratchpad(int user);
// on != 0: the oneDNN path runs anyway, with an fp32 matmul primitive on inputs widened from
// bf16 into buffers of the same layout, so a CPU without bf16 support still tests the
// descriptors, strides, alpha and beta handling of that path. Slow; for tests only.
void ct_gemm_bf16_test_f32_primitive(int on);
// on != 0: the "amx" and "avx512_bf16" paths run oneDNN's kernels instead of ctitan's, so that
// tests reach that path's execution; 0 restores the default.
void ct_gemm_bf16_prefer_onednn(int on);
// How many primitives the cache has created since start (tests: steady state creates none).
long ct_gemm_bf16_primitives_created(void);

// Nonzero while a ct_gemm_bf16 call is inside oneDNN's dnnl_primitive_execute (at most one at a
// time: the call holds the path's mutex). oneDNN 2.x builds every execution's argument map with
// operator new -- six small new/delete pairs per call, freed before it returns -- and its C API
// has no call that avoids it (the allocation-free ukernel API came with oneDNN 3.5), hence the
// buffer of onednn_arena.h. The steady-state allocation test and bench_train count the heap calls
// made in this window apart from the rest, to name the culprit if one appears; both must be none.
// Only a build without ctitan's kernels (and the knobs' oneDNN runs above) enters it: ctitan's
// AMX and AVX-512 BF16 kernels and the fallback never do.
extern volatile int ct_gemm_bf16_in_onednn;

// ctitan's own AVX-512 BF16 gemm (kernels/cpu/gemm_bf16_avx512.c): ct_gemm_bf16's contract for
// K > 0, alpha != 0 and leading dimensions at least the row lengths. Available (nonzero) when
// this build has AVX-512 BF16 and the CPU too; the "avx512_bf16" path then runs it instead of
// oneDNN. Allocates only its per-thread packing buffers, once per thread.
int ct_gemm_bf16_avx512_available(void);
// Whether ct_gemm_bf16_avx512 runs the AMX tile kernel (gemm_bf16_amx.h) rather than VDPBF16PS:
// where AMX is usable, unless a test turned it off with allow_amx(0) (call while no gemm runs).
int ct_gemm_bf16_avx512_uses_amx(void);
void ct_gemm_bf16_avx512_allow_amx(int on);
void ct_gemm_bf16_avx512(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                         const uint16_t *B, long ldb, float beta, float *C, long ldc);
// The packed B of ct_gemm_bf16_packed_bytes / _pack_b / _packed on ctitan's kernel.
size_t ct_gemm_bf16_avx512_packed_bytes(long K, long N);
void ct_gemm_bf16_avx512_pack_b(int trans_b, long K, long N, const uint16_t *B, long ldb, void *dst);
void ct_gemm_bf16_avx512_packed(int trans_a, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                                const void *packed, float beta, float *C, long ldc);
// ct_gemm_bf16_epilogue_rows's product on ctitan's kernel where it is one panel and one K block
// (returns 1); otherwise computes nothing and returns 0.
int ct_gemm_bf16_avx512_epilogue(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A,
                                 long lda, const uint16_t *B, long ldb, const void *packed_b,
                                 const ct_gemm_bf16_epilogue *epi);
#endif
