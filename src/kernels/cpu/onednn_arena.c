// C++'s global operator new / delete, replaced so that the allocations oneDNN makes inside a
// matmul execution come from a buffer ctitan owns: the why and the contract in onednn_arena.h.
//
// The replaceable functions are defined here under their Itanium C++ ABI names (the names g++
// and libstdc++ use on every Linux target): a definition in the program replaces libstdc++'s for
// the whole process, libdnnl's calls included, as the C++ standard provides for. All the plain,
// array, sized and nothrow forms are defined, so that no pointer from one of them can reach a
// delete of libstdc++'s; the over-aligned forms (std::align_val_t) stay libstdc++'s and never see
// the buffer's pointers.
#include "kernels/cpu/onednn_arena.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"

// 64 KiB: a matmul execution takes ~300 bytes, so room for two hundred windows whose blocks all
// outlived them before a call would go to malloc.
#define ARENA_BYTES (64 * 1024)
#define ARENA_ALIGN 16  // operator new's alignment on x86-64 and aarch64 (__STDCPP_DEFAULT_NEW_ALIGNMENT__)

static _Alignas(64) unsigned char g_buf[ARENA_BYTES];
static size_t g_top;                 // next free byte; touched only by the window's thread
static long g_served, g_live, g_overflow;  // atomics: a block may be deleted from any thread
static _Thread_local int tl_in_window;

// Set while a bf16 matmul runs inside oneDNN (gemm_bf16.h): defined here, outside the kernel sets,
// so that every set raises the one flag a test reads.
volatile int ct_gemm_bf16_in_onednn;

void ct_onednn_arena_enter(void) {
    if (__atomic_load_n(&g_live, __ATOMIC_ACQUIRE) == 0) g_top = 0;  // nothing of the buffer in use
    tl_in_window = 1;
}

void ct_onednn_arena_exit(void) { tl_in_window = 0; }

int ct_onednn_arena_owns(const void *p) {
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)g_buf;
    return a >= lo && a < lo + ARENA_BYTES;
}

ct_onednn_arena_stats ct_onednn_arena_get_stats(void) {
    return (ct_onednn_arena_stats){.served = __atomic_load_n(&g_served, __ATOMIC_RELAXED),
                                   .live = __atomic_load_n(&g_live, __ATOMIC_RELAXED),
                                   .overflow = __atomic_load_n(&g_overflow, __ATOMIC_RELAXED),
                                   .bytes = ARENA_BYTES};
}

static void *from_buffer(size_t n) {
    size_t need = (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (need == 0) need = ARENA_ALIGN;  // new(0) must still return a distinct pointer
    if (need > ARENA_BYTES - g_top) {
        __atomic_fetch_add(&g_overflow, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    void *p = g_buf + g_top;
    g_top += need;
    __atomic_fetch_add(&g_served, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_live, 1, __ATOMIC_RELEASE);
    return p;
}

static void *new_block(size_t n, int nothrow) {
    void *p = tl_in_window ? from_buffer(n) : NULL;
    if (!p) p = malloc(n ? n : 1);
    if (!p && !nothrow) ct_fatal("operator new", "out of memory (%zu bytes)", n);
    return p;
}

static void delete_block(void *p) {
    if (!p) return;
    if (ct_onednn_arena_owns(p)) __atomic_fetch_sub(&g_live, 1, __ATOMIC_RELEASE);
    else free(p);
}

// std::nothrow_t is an empty struct; only its address is passed.
void *_Znwm(size_t n) { return new_block(n, 0); }                            // new(size_t)
void *_Znam(size_t n) { return new_block(n, 0); }                            // new[](size_t)
void *_ZnwmRKSt9nothrow_t(size_t n, const void *tag) { return new_block(n, 1); }  // new(size_t, nothrow)
void *_ZnamRKSt9nothrow_t(size_t n, const void *tag) { return new_block(n, 1); }  // new[](size_t, nothrow)
void _ZdlPv(void *p) { delete_block(p); }                                   // delete(void *)
void _ZdaPv(void *p) { delete_block(p); }                                   // delete[](void *)
void _ZdlPvm(void *p, size_t n) { delete_block(p); }                        // delete(void *, size_t)
void _ZdaPvm(void *p, size_t n) { delete_block(p); }                        // delete[](void *, size_t)
void _ZdlPvRKSt9nothrow_t(void *p, const void *tag) { delete_block(p); }    // delete(void *, nothrow)
void _ZdaPvRKSt9nothrow_t(void *p, const void *tag) { delete_block(p); }    // delete[](void *, nothrow)
