// The schedule lowering passes (parallel/schedule_lowering.h) on small lists whose lowered form
// is written out by hand here from the passes' rules: where the sends and receives go, what the
// forward-only list of a rank holding two stages reads like, and where UNSHARD / RESHARD wrap a
// stage's span.
#include <string.h>

#include "parallel/schedule_lowering.h"
#include "test.h"

// The text form of s into buf.
static const char *text_of(const ct_schedule *s, char *buf, size_t n) {
    ct_schedule_format(s, buf, n);
    return buf;
}

static void parse(ct_schedule *s, const char *text) {
    ct_schedule_init(s);
    CHECK(ct_schedule_parse(s, text) == CT_OK, "parse %s: %s", text, ct_last_error());
}

// Two ranks, stages 0 and 1 on rank 0 and 1: rank 1's 1F1B order gets the receive of its input
// before each forward and the send of its input gradient after each backward; rank 0 the send of
// its output and the receive of its output's gradient.
static void test_add_comms_two_ranks(void) {
    int stage_rank[2] = {0, 1};
    ct_schedule compute, out;
    char buf[512];
    parse(&compute, "0F0 0F1 0B0 0B1");
    ct_schedule_init(&out);
    ct_schedule_add_comms(&compute, stage_rank, 2, true, &out);
    const char *want0 = "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 REDUCE_GRADS RESHARD";
    CHECK(!strcmp(text_of(&out, buf, sizeof buf), want0), "rank 0: %s, want %s", buf, want0);
    ct_schedule_free(&compute);
    ct_schedule_free(&out);

    parse(&compute, "1F0 1B0 1F1 1B1");
    ct_schedule_init(&out);
    ct_schedule_add_comms(&compute, stage_rank, 2, true, &out);
    const char *want1 = "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 REDUCE_GRADS RESHARD";
    CHECK(!strcmp(text_of(&out, buf, sizeof buf), want1), "rank 1: %s, want %s", buf, want1);
    ct_schedule_free(&compute);
    ct_schedule_free(&out);
}

// A split backward: the input-gradient pass sends, the weight pass does not; and no message
// between two stages of one rank (stages 1 and 2 both on rank 1, V-shaped).
static void test_add_comms_split_and_local(void) {
    int stage_rank[4] = {0, 1, 1, 0};
    ct_schedule compute, out;
    char buf[512];
    parse(&compute, "1F0 2F0 2I0 1I0 2W0 1W0");
    ct_schedule_init(&out);
    ct_schedule_add_comms(&compute, stage_rank, 4, true, &out);
    const char *want = "1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2I0 1I0 1SEND_B0 2W0 1W0 REDUCE_GRADS RESHARD";
    CHECK(!strcmp(text_of(&out, buf, sizeof buf), want), "%s, want %s", buf, want);
    ct_schedule_free(&compute);
    ct_schedule_free(&out);
}

// Forward only on the V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2; micro-batch-major,
// each rank's stages in model order.
static void test_forward_only(void) {
    int stage_rank[4] = {0, 1, 1, 0};
    ct_schedule out;
    char buf[512];
    ct_schedule_init(&out);
    ct_schedule_forward_only(stage_rank, 4, 0, 2, &out);
    const char *want0 = "0F0 0SEND_F0 3RECV_F0 3F0 0F1 0SEND_F1 3RECV_F1 3F1 RESHARD";
    CHECK(!strcmp(text_of(&out, buf, sizeof buf), want0), "rank 0: %s, want %s", buf, want0);
    ct_schedule_free(&out);
    ct_schedule_init(&out);
    ct_schedule_forward_only(stage_rank, 4, 1, 2, &out);
    const char *want1 = "1RECV_F0 1F0 2F0 2SEND_F0 1RECV_F1 1F1 2F1 2SEND_F1 RESHARD";
    CHECK(!strcmp(text_of(&out, buf, sizeof buf), want1), "rank 1: %s, want %s", buf, want1);
    ct_schedule_free(&out);
}

// UNSHARD right before a stage's first action (a receive counts: it fills the stage's slot),
// RESHARD right after its last; step-level actions untouched.
static void test_unshard_per_stage(void) {
    ct_schedule s;
    char buf[512];
    parse(&s, "1RECV_F0 1F0 3F0 3B0 1F1 1B0 3F1 3B1 1B1 1SEND_B1 REDUCE_GRADS RESHARD");
    ct_schedule_unshard_per_stage(&s, 4);
    const char *want = "1UNSHARD 1RECV_F0 1F0 3UNSHARD 3F0 3B0 1F1 1B0 3F1 3B1 3RESHARD 1B1 1SEND_B1 1RESHARD "
                       "REDUCE_GRADS RESHARD";
    CHECK(!strcmp(text_of(&s, buf, sizeof buf), want), "%s, want %s", buf, want);
    ct_schedule_free(&s);
}

int main(void) {
    CT_RUN(test_add_comms_two_ranks);
    CT_RUN(test_add_comms_split_and_local);
    CT_RUN(test_forward_only);
    CT_RUN(test_unshard_per_stage);
    CT_TEST_EXIT();
}
