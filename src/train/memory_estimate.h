// A run's memory per rank, estimated from the configuration and the layout before anything is
// allocated, so a run that cannot fit is refused with one line instead of failing to allocate
// gigabytes half-way through start-up. Parameters, gradients and AdamW state are exact shares
// (fp32 masters; FSDP splits them over dp_shard x cp, tensor parallel over tp, the pipeline
// over its stages); gather buffers and activations are estimates: what a block keeps for
// backward in fp32, per token of a micro-batch, times the micro-batches a pipeline keeps in
// flight, plus two gathered layer groups.
#ifndef CT_MEMORY_ESTIMATE_H
#define CT_MEMORY_ESTIMATE_H
#include "core/config.h"
#include "model/llama_config.h"

typedef struct {
    double params, grads, optimizer, gathered, activations;  // bytes per rank
    double total;
} ct_memory_estimate;

// degrees: pp, tp, and the FSDP shard group (dp_shard x cp), cp.
ct_memory_estimate ct_memory_estimate_rank(const ct_llama_config *m, const ct_config *c, int pp, int tp, int shard,
                                           int cp);
// Bytes this node can still give (MemAvailable), 0 when unknown.
double ct_memory_available(void);
#endif
