// A buffer owned by ctitan for the heap allocations oneDNN 2.x makes inside each matmul
// execution (kernels/cpu/onednn_arena.c), so that a steady training step makes no heap call at
// all on the oneDNN path too.
//
// What it serves: dnnl_primitive_execute builds each call's argument map as a std::unordered_map
// -- six operator-new calls of 32 to 104 bytes on the calling thread, freed before it returns --
// and oneDNN 2.x's C API has no call that avoids it. ctitan replaces C++'s global operator new
// and delete (their Itanium-ABI names, from C): while a thread is between enter and exit, its
// operator-new calls are bump-allocated from a fixed 64 KiB static buffer; every other call, on
// any thread, goes to malloc exactly as libstdc++'s own would (out of memory ends the job with a
// message instead of throwing, which C cannot).
//
// Safety: delete recognises the buffer's pointers by address and only counts them back. The
// buffer is rewound at enter only when every block served from it has been deleted, so a block
// that outlives its window is never handed out twice; once the buffer is full, later calls go to
// malloc (and count as overflow, which the steady-state test would see as heap calls).
//
// Threads: one window at a time (ct_gemm_bf16 opens it under the mutex that serialises its oneDNN
// calls); a block may be deleted from any thread.
#ifndef CT_CPU_ONEDNN_ARENA_H
#define CT_CPU_ONEDNN_ARENA_H
#include <stddef.h>

// The calling thread's operator-new calls are served from the buffer until ct_onednn_arena_exit.
void ct_onednn_arena_enter(void);
void ct_onednn_arena_exit(void);

// Whether p points into the buffer (tests).
int ct_onednn_arena_owns(const void *p);

typedef struct {
    long served;    // operator-new calls served from the buffer since start
    long live;      // of those, not yet deleted
    long overflow;  // calls inside a window that the buffer could not hold (went to malloc)
    size_t bytes;   // the buffer's size
} ct_onednn_arena_stats;
ct_onednn_arena_stats ct_onednn_arena_get_stats(void);
#endif
