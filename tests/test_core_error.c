// Tests of core/error.h: the last-error message and ct_fatal with and without an abort hook
// (comm/ registers one in a multi-process job; core/ itself knows no MPI).
#include <string.h>

#include "core/error.h"
#include "fatal_child.h"
#include "test.h"


// A pretend job: ctx points at {rank, size}; abort_job exits with 40 + code, so the test can
// tell that the hook (and not the fallback exit(1)) ended the process.
static int job_a[2] = {2, 3}, job_single[2] = {0, 1};
static int fake_rank(void *ctx) { return ((int *)ctx)[0]; }
static int fake_size(void *ctx) { return ((int *)ctx)[1]; }
static void fake_abort(void *ctx, int code) { _exit(40 + code); }
static void fake_abort_returns(void *ctx, int code) {}
static const ct_abort_hook hook_a = {job_a, fake_rank, fake_size, fake_abort};
static const ct_abort_hook hook_single = {job_single, fake_rank, fake_size, fake_abort};
static const ct_abort_hook hook_cannot = {job_a, fake_rank, fake_size, fake_abort_returns};

static void fatal_without_hook(void) {
    ct_set_abort_hook(NULL);
    ct_fatal("where", "what %d", 7);
}
static void fatal_in_a_job(void) {
    ct_set_abort_hook(&hook_a);
    ct_fatal("loader", "bad shard %s", "x");
}
static void fatal_in_a_job_of_one(void) {
    ct_set_abort_hook(&hook_single);
    ct_fatal("loader", "alone");
}
static void fatal_when_abort_returns(void) {
    ct_set_abort_hook(&hook_cannot);
    ct_fatal("comm", "abort did not work");
}
static void fatal_after_unregister(void) {
    ct_set_abort_hook(&hook_a);
    ct_set_abort_hook(NULL);
    ct_fatal("x", "y");
}

static void test_set_error(void) {
    CHECK(ct_set_error("file %s: line %d", "a.toml", 3) == CT_ERR, "returns CT_ERR");
    CHECK(strcmp(ct_last_error(), "file a.toml: line 3") == 0, "%s", ct_last_error());
}

// Wrapping the previous message with context reads the buffer the call replaces.
static void test_set_error_wraps_the_last_one(void) {
    ct_set_error("disk full");
    ct_set_error("%s does not fit: %s", "step-20", ct_last_error());
    CHECK(strcmp(ct_last_error(), "step-20 does not fit: disk full") == 0, "%s", ct_last_error());
    ct_set_error("%s (%s)", ct_last_error(), "again");
    CHECK(strcmp(ct_last_error(), "step-20 does not fit: disk full (again)") == 0, "%s", ct_last_error());
}

// The mark that every process holds a message follows it through callers that add context, and
// goes with the first message that is not a wrap of it.
static void test_shared_mark_survives_wrapping(void) {
    ct_set_error("rank 1: step-2/rank-00001.safetensors: CRC-32 mismatch");
    CHECK(!ct_error_is_shared(), "a new message is not shared");
    ct_error_mark_shared();
    ct_set_error("checkpoint refused: %s (earlier: --checkpoint.load_step N)", ct_last_error());
    ct_set_error("%s", ct_last_error());
    ct_set_error("ctx: %s", ct_last_error());
    CHECK(ct_error_is_shared(), "lost through wrapping: %s", ct_last_error());
    ct_set_error("disk full");
    CHECK(!ct_error_is_shared(), "an unrelated message kept the mark");
    ct_set_error("ctx: rank 1: step-2/rank-00001.safetensors: CRC-32 mismatch");
    CHECK(!ct_error_is_shared(), "a message that once was shared, set anew, is not");
    // A wrap that fills the buffer cuts the shared message at its end: still the same error.
    char long_msg[900];
    memset(long_msg, 'a', sizeof long_msg - 1);
    long_msg[sizeof long_msg - 1] = 0;
    ct_set_error("%s", long_msg);
    ct_error_mark_shared();
    ct_set_error("%.300s: %s", long_msg, ct_last_error());
    CHECK(ct_error_is_shared() && strlen(ct_last_error()) == 1023, "cut wrap: %zu", strlen(ct_last_error()));
}

static void test_fatal_lines_and_endings(void) {
    char err[512];
    int rc = ct_test_run_fatal_void(fatal_without_hook, err, sizeof err);
    CHECK(rc == 1 && strcmp(err, "where: what 7\n") == 0, "no hook: rc %d '%s'", rc, err);
    rc = ct_test_run_fatal_void(fatal_in_a_job, err, sizeof err);
    CHECK(rc == 41 && strcmp(err, "[rank 2] loader: bad shard x\n") == 0, "job: rc %d '%s'", rc, err);
    // A job of one: no rank in the line, and exit(1) rather than the job abort.
    rc = ct_test_run_fatal_void(fatal_in_a_job_of_one, err, sizeof err);
    CHECK(rc == 1 && strcmp(err, "loader: alone\n") == 0, "job of one: rc %d '%s'", rc, err);
    // An abort that cannot end the job still ends this process.
    rc = ct_test_run_fatal_void(fatal_when_abort_returns, err, sizeof err);
    CHECK(rc == 1 && strcmp(err, "[rank 2] comm: abort did not work\n") == 0, "fallback: rc %d '%s'", rc, err);
    rc = ct_test_run_fatal_void(fatal_after_unregister, err, sizeof err);
    CHECK(rc == 1 && strcmp(err, "x: y\n") == 0, "unregistered: rc %d '%s'", rc, err);
}

int main(void) {
    CT_RUN(test_set_error);
    CT_RUN(test_set_error_wraps_the_last_one);
    CT_RUN(test_shared_mark_survives_wrapping);
    CT_RUN(test_fatal_lines_and_endings);
    CT_TEST_EXIT();
}
