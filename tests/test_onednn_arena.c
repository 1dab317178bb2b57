// The buffer that serves oneDNN's per-execution allocations (kernels/cpu/onednn_arena.h): C++'s
// operator new and delete, replaced by ctitan, called here by their ABI names as libdnnl calls
// them. Outside a window every call goes to malloc; inside, blocks come from the buffer, are
// aligned and distinct, and the buffer is rewound only once all of them are deleted; what does
// not fit goes to malloc; another thread is never served from it. Then the real thing: a steady
// oneDNN matmul execution is served from the buffer and leaves nothing in it.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/onednn_arena.h"
#include "test.h"

// operator new(size_t), new[](size_t), delete(void *), delete(void *, size_t), delete[](void *)
void *_Znwm(size_t n);
void *_Znam(size_t n);
void _ZdlPv(void *p);
void _ZdlPvm(void *p, size_t n);
void _ZdaPv(void *p);

static long live(void) { return ct_onednn_arena_get_stats().live; }

static void outside_a_window_new_is_malloc(void) {
    void *p = _Znwm(40), *q = _Znam(0);
    CHECK(p && q && p != q, "new returned %p and %p", p, q);
    CHECK(!ct_onednn_arena_owns(p) && !ct_onednn_arena_owns(q), "served from the buffer outside a window");
    memset(p, 0xab, 40);
    _ZdlPv(p);  // glibc's free would abort on a pointer it did not hand out
    _ZdaPv(q);
}

static void inside_a_window_blocks_come_from_the_buffer(void) {
    long served0 = ct_onednn_arena_get_stats().served;
    ct_onednn_arena_enter();
    void *a = _Znwm(32), *b = _Znwm(104), *c = _Znwm(0), *d = _Znam(1);
    ct_onednn_arena_exit();
    void *blocks[] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
        CHECK(ct_onednn_arena_owns(blocks[i]), "block %d at %p is not the buffer's", i, blocks[i]);
        CHECK((uintptr_t)blocks[i] % 16 == 0, "block %d at %p is not 16-byte aligned", i, blocks[i]);
        for (int j = 0; j < i; j++) CHECK(blocks[i] != blocks[j], "blocks %d and %d are the same", i, j);
    }
    CHECK((char *)b - (char *)a >= 32 && (char *)c - (char *)b >= 104, "blocks overlap");
    memset(a, 1, 32), memset(b, 2, 104);
    CHECK(((unsigned char *)a)[31] == 1, "block a overwritten by block b");
    CHECK(ct_onednn_arena_get_stats().served - served0 == 4 && live() == 4, "served %ld, live %ld",
          ct_onednn_arena_get_stats().served - served0, live());
    _ZdlPvm(a, 32), _ZdlPv(b), _ZdlPv(c), _ZdaPv(d);
    CHECK(live() == 0, "%ld blocks still live after deleting all", live());
}

// A block that outlives its window keeps the buffer from being rewound; once it is deleted the
// next window starts from the beginning again.
static void a_block_that_outlives_its_window_is_never_reused(void) {
    ct_onednn_arena_enter();
    void *first = _Znwm(48);
    ct_onednn_arena_exit();
    _ZdlPv(first);
    ct_onednn_arena_enter();
    void *kept = _Znwm(48);  // rewound: the buffer was empty
    ct_onednn_arena_exit();
    CHECK(kept == first, "an empty buffer was not rewound (%p, then %p)", first, kept);
    ct_onednn_arena_enter();
    void *next = _Znwm(48);
    ct_onednn_arena_exit();
    CHECK(next != kept && ct_onednn_arena_owns(next), "a live block's memory handed out again");
    _ZdlPv(kept), _ZdlPv(next);
    ct_onednn_arena_enter();
    void *again = _Znwm(8);
    ct_onednn_arena_exit();
    CHECK(again == first, "not rewound after every block was deleted");
    _ZdlPv(again);
}

static void what_does_not_fit_goes_to_malloc(void) {
    ct_onednn_arena_stats s0 = ct_onednn_arena_get_stats();
    ct_onednn_arena_enter();
    void *big = _Znwm(s0.bytes + 1), *small = _Znwm(16);
    ct_onednn_arena_exit();
    CHECK(big && !ct_onednn_arena_owns(big), "a block larger than the buffer came from it");
    CHECK(ct_onednn_arena_owns(small), "a small block after an overflow did not come from the buffer");
    CHECK(ct_onednn_arena_get_stats().overflow - s0.overflow == 1, "overflow not counted");
    memset(big, 0, s0.bytes + 1);
    _ZdlPv(big), _ZdlPv(small);
}

static void *other_thread(void *arg) {
    void *p = _Znwm(24);
    *(int *)arg = ct_onednn_arena_owns(p);
    _ZdlPv(p);
    return NULL;
}

static void another_thread_is_not_served(void) {
    int owned = -1;
    pthread_t th;
    ct_onednn_arena_enter();  // this thread's window only
    CHECK(pthread_create(&th, NULL, other_thread, &owned) == 0, "pthread_create");
    pthread_join(th, NULL);
    ct_onednn_arena_exit();
    CHECK(owned == 0, "another thread was served from the buffer");
}

// A real oneDNN execution: its bf16 kernels where the CPU has bf16 units (the path AMX machines
// take; this CPU's native kernel set aside), else the fp32 test primitive through the same call.
// From the second execution on, its allocations come from the buffer and are all given back.
static void a_steady_onednn_execution_is_served_and_leaves_nothing(void) {
    int bf16_units = strcmp(ct_bf16_gemm_path(), "fallback") != 0;
    if (bf16_units) ct_gemm_bf16_prefer_onednn(1);
    else ct_gemm_bf16_test_f32_primitive(1);
    long M = 96, N = 80, K = 64;
    uint16_t *A = calloc((size_t)(M * K), 2), *B = calloc((size_t)(K * N), 2);
    float *C = calloc((size_t)(M * N), 4);
    for (long i = 0; i < M * K; i++) A[i] = 0x3f80;  // 1.0
    for (long i = 0; i < K * N; i++) B[i] = 0x4000;  // 2.0
    ct_gemm_bf16(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);  // first execution: outside the window
    ct_onednn_arena_stats s0 = ct_onednn_arena_get_stats();
    ct_gemm_bf16(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    ct_onednn_arena_stats s1 = ct_onednn_arena_get_stats();
    CHECK(s1.served > s0.served, "a steady execution took nothing from the buffer (%s path)", ct_bf16_gemm_path());
    CHECK(s1.overflow == s0.overflow && s1.live == 0, "overflow %ld, %ld blocks left live",
          s1.overflow - s0.overflow, s1.live);
    CHECK(C[0] == 2.0f * K && C[M * N - 1] == 2.0f * K, "C = %g, %g, expected %g", C[0], C[M * N - 1], 2.0 * K);
    free(A), free(B), free(C);
    if (bf16_units) ct_gemm_bf16_prefer_onednn(0);
    else ct_gemm_bf16_test_f32_primitive(0);
}

int main(void) {
    CT_RUN(outside_a_window_new_is_malloc);
    CT_RUN(inside_a_window_blocks_come_from_the_buffer);
    CT_RUN(a_block_that_outlives_its_window_is_never_reused);
    CT_RUN(what_does_not_fit_goes_to_malloc);
    CT_RUN(another_thread_is_not_served);
    CT_RUN(a_steady_onednn_execution_is_served_and_leaves_nothing);
    CT_TEST_EXIT();
}
