// Profiling a training run TorchTitan's [profiling] settings:
//
//   profiling.enable_profiling     every profiling.profile_freq-th step (N, 2N, ...) each rank
//                                  records spans (core/trace.h) -- the step, its data, the
//                                  executor's actions, each block's forward / backward /
//                                  recompute and inside it each operation (the linear layers by
//                                  name -- attention.wqkv.forward, feed_forward.w2.backward, ...
//                                  --, attention, rmsnorm, rope, swiglu, residual adds; the
//                                  head's output projection with cross-entropy; AdamW's update:
//                                  category "kernel"), FSDP's
//                                  gathers and reduce-scatters, every wait on a collective named by
//                                  collective and group, the gradient norm, the optimizer,
//                                  validation and checkpoint saves -- and writes
//                                  <dump>/<save_traces_folder>/iteration_<step>/rank<R>_trace.json
//                                  (Chrome trace event format: open it in https://ui.perfetto.dev);
//                                  rank 0 then draws every rank's spans as one SVG timeline,
//                                  timeline.svg, in the same folder.
//   profiling.enable_memory_snapshot  after the run's first step each rank writes
//                                  <dump>/<save_memory_snapshot_folder>/rank<R>.txt: every buffer
//                                  by category with its size and where it was allocated
//                                  (core/memory.h); and an allocation that fails writes
//                                  rank<R>_failed.txt there before the job ends.
//
// The span buffer is allocated at start-up (through ct_mem_alloc, so it shows as "other" memory
// in the metrics and snapshots) and the trace written with write(2) from a stack buffer, so
// recording and writing a rank's trace allocate nothing; drawing the SVG (rank 0, profiled steps
// only) does, as do MPI's collectives on more than one rank (the barrier, the agreement). A profiled step starts with a barrier over the world, so the time
// origins of the ranks' files agree to within the barrier's skew, even across hosts.
// Failures to write are printed by rank 0 once, never fatal: a profile is a by-product.
#ifndef CT_PROFILING_H
#define CT_PROFILING_H
#include <stdbool.h>

#include "comm/mesh.h"
#include "core/config.h"
#include "core/error.h"

struct ct_kernels;

// The span buffer's planning (ct_profiler_init): spans one block may record for one micro-batch
// over all its passes -- forward, recompute, backward (or its input and weight halves) -- with
// its per-operation spans (block.c), FSDP's gather and reduce-scatter, and the waits of tp and
// 8-bit amax collectives; plus CT_PROFILE_CP_SPANS per context-parallel rank beyond the first
// (a ring's sends and receives). Measured (tests/test_trace.c checks the bound): 22 fp32 on one
// process, 32 under FSDP 2 x TP 2, 52 adding sequence parallel, full recompute and async tp, 82
// with TP 2 x CP 2 (ring), float8, sequence parallel, full recompute and async tp.
enum { CT_PROFILE_BLOCK_SPANS = 96, CT_PROFILE_CP_SPANS = 16 };

typedef struct {
    bool traces;            // profiling.enable_profiling
    bool snapshots;         // profiling.enable_memory_snapshot
    int freq;               // profiling.profile_freq
    bool recording;         // the step in progress is being profiled
    int iteration;          // ... which one
    int step_span;          // its "step" span
    bool snapshot_written;  // the first step's memory snapshot
    char traces_dir[CT_STR * 2 + 8];    // <dump>/<save_traces_folder>
    char snapshot_dir[CT_STR * 2 + 8];  // <dump>/<save_memory_snapshot_folder>
    ct_group *world;                    // the ranks that profile together (barrier, agreement)
    const ct_mesh *mesh;                // their layout and this rank's place in it (trace names)
} ct_profiler;

// Start-up, once the world group exists and before the large buffers are allocated: the span
// buffer (sized from the model, micro-batches and validation: spans past it are counted as
// dropped) and the failure snapshot's path. world and mesh are kept by reference (the mesh may be
// filled later, before the first step).
void ct_profiler_init(ct_profiler *p, const ct_config *cfg, ct_group *world, const ct_mesh *mesh);
// The run's kernel table, once chosen: on an asynchronous device every profiled span waits for
// the device at both ends (its synchronize), so that it times the device's work, not its launch.
void ct_profiler_use_device(ct_profiler *p, const struct ct_kernels *k);
// Forgets the failure snapshot's path (a later allocation failure in this process belongs to
// no run).
void ct_profiler_free(ct_profiler *p);

// Around each iteration of the training loop (the step, its validation and checkpoint).
// step: the optimizer steps done before the iteration (begin) or after it (end). Collective over
// the world on profiled steps (a barrier before, an agreement after).
void ct_profiler_step_begin(ct_profiler *p, int step);
void ct_profiler_step_end(ct_profiler *p, int step);
// The half of step_end that allocates nothing: stops recording and writes this rank's trace
// file into iteration_<step>/ (the folder made here). Not collective.
ct_status ct_profiler_write_trace(ct_profiler *p, char *path, size_t n);

// Draws the traces rank0_trace.json .. rank<n-1>_trace.json of one iteration folder as an SVG
// timeline: a lane per rank (the first 32), its main thread's spans nested in levels (a span
// inside another one level below it), coloured by category. A rank whose file is missing is
// named in *missing (ranks on another host without a shared file system) and left out.
ct_status ct_profile_draw_timeline(const char *dir, int n_ranks, const char *svg_path, const char *title,
                                   int *missing);
#endif
