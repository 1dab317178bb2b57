// A schedule is data: one rank's ordered list of actions over (stage, micro-batch). Gradient
// accumulation without a pipeline is the list F0 B0 F1 B1 ...; pipeline schedules (1F1B,
// interleaved, zero-bubble) are other lists over the same actions, and one executor runs any of
// them (parallel/executor.h).
//
// Text form, one action per token, as PyTorch's pipelining runtime writes them:
//   <stage><F|B|I|W><mb>      forward, backward, backward-input, backward-weight: "0F3", "1I0"
//   <stage>SEND_F<mb> ...     SEND_F, RECV_F, SEND_B, RECV_B: activations / gradients between stages
//   <stage>UNSHARD            gather the stage's parameters now and keep them whole (data sharding)
//   <stage>RESHARD            let go of them; RESHARD alone: every parameter group still gathered
//   REDUCE_GRADS              the step's gradient reduction (replicas, replicated tensors)
#ifndef CT_SCHEDULE_H
#define CT_SCHEDULE_H
#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef enum {
    CT_ACT_FORWARD = 0,
    CT_ACT_BACKWARD,
    CT_ACT_BACKWARD_INPUT,
    CT_ACT_BACKWARD_WEIGHT,
    CT_ACT_SEND_F,
    CT_ACT_RECV_F,
    CT_ACT_SEND_B,
    CT_ACT_RECV_B,
    CT_ACT_UNSHARD,       // per stage: gather its parameters now, keep them until RESHARD
    CT_ACT_RESHARD,       // per stage (or every stage): let go of its gathered parameters
    CT_ACT_REDUCE_GRADS,  // the step's gradient reduction
    CT_ACT_NKINDS
} ct_action_kind;

typedef struct {
    ct_action_kind kind;
    int stage;  // global stage index (-1: REDUCE_GRADS, or RESHARD of every stage)
    int mb;     // micro-batch (-1: actions on a stage or the step)
} ct_action;

typedef struct {
    ct_action *actions;
    int count, cap;
} ct_schedule;

void ct_schedule_init(ct_schedule *s);
void ct_schedule_free(ct_schedule *s);
void ct_schedule_push(ct_schedule *s, ct_action_kind kind, int stage, int mb);

// One stage, n_mb micro-batches: F0 B0 F1 B1 ... then REDUCE_GRADS and RESHARD (training), or
// F0 F1 ... RESHARD (evaluation: forward only).
void ct_schedule_accumulation(ct_schedule *s, int stage, int n_mb, bool training);

// Text form (see the top of this file), tokens separated by spaces, commas or newlines.
ct_status ct_schedule_parse(ct_schedule *s, const char *text);
// One action's text form ("0F3", "1UNSHARD", "REDUCE_GRADS"); returns snprintf's length.
int ct_action_format(const ct_action *a, char *buf, size_t n);
// Writes the text form into buf (at most n bytes, NUL-terminated, whole actions only); returns the
// length the whole text needs.
int ct_schedule_format(const ct_schedule *s, char *buf, size_t n);

// Checks what one rank's list can be checked for alone, for the stages it runs: every
// micro-batch's forward once; then either one backward or one backward-input followed by one
// backward-weight; nothing before its forward; a micro-batch's forward through a stage only
// after the previous stage's (when both are here) and its backward the other way round.
// CT_ERR with the first offending action when it is not legal. training false: forwards only.
ct_status ct_schedule_check(const ct_schedule *s, int n_mb, bool training);

// Most parameter groups UNSHARD holds whole at once, given each stage's group count.
int ct_schedule_max_unsharded(const ct_schedule *s, const int *groups_of_stage, int n_stages);
// Most (stage, micro-batch) pairs held at once: a pair from its first action on the stage to its
// last use, last_use[stage * n_mb + mb] when given (an index in s, possibly a later action of
// another stage), else its last action there. stage < 0: every stage together (a rank's total).
int ct_schedule_peak_held(const ct_schedule *s, int stage, int n_stages, int n_mb, const int *last_use);
// Most micro-batches this stage holds activations for at once: each from its first action on the
// stage (forward, or the receive of its input) to its last.
int ct_schedule_max_in_flight(const ct_schedule *s, int stage);
// Whether the list splits backward into input and weight passes on this stage.
bool ct_schedule_splits_backward(const ct_schedule *s, int stage);
const char *ct_action_kind_name(ct_action_kind k);  // "F", "B", "I", "W", "SEND_F", ...
#endif
