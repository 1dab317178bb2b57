// Tests of the error code and subject that core/error.h keeps beside the message: set, kept when a
// caller wraps the message with its context, dropped by an unrelated message, and independent of
// the mark that every process holds the message.
#include <string.h>

#include "core/error.h"
#include "expect_error.h"
#include "test.h"

static void test_code_and_subject_recorded(void) {
    EXPECT_ERROR(ct_set_error_at(CT_E_CONFIG, "training.steps", "training.steps: expected >= 1, got %d", 0),
                 CT_E_CONFIG, "training.steps", "expected >= 1, got 0");
    EXPECT_ERROR(ct_set_error_code(CT_E_COMM, "peer %d did not answer", 3), CT_E_COMM, "", "peer 3 did not answer");
    EXPECT_ERROR(ct_set_error("no kind"), CT_E_NONE, "", "no kind");
    EXPECT_ERROR(ct_set_error_at(CT_E_IO, NULL, "x"), CT_E_IO, "", "x");
}

static void test_code_survives_wrapping(void) {
    ct_set_error_at(CT_E_IO, "/data/shard_0.bin", "/data/shard_0.bin: No such file or directory");
    ct_set_error("training.dataset: %s", ct_last_error());
    ct_set_error("%s (rank 2)", ct_last_error());
    EXPECT_ERROR(CT_ERR, CT_E_IO, "/data/shard_0.bin", "training.dataset: /data/shard_0.bin: No such file");
    // A code given while wrapping wins; the subject stays unless one is given too.
    ct_set_error_code(CT_E_DATA, "loader: %s", ct_last_error());
    EXPECT_ERROR(CT_ERR, CT_E_DATA, "/data/shard_0.bin", "loader: training.dataset");
    ct_set_error_at(CT_E_CONFIG, "training.dataset", "bad: %s", ct_last_error());
    EXPECT_ERROR(CT_ERR, CT_E_CONFIG, "training.dataset", "bad: loader:");
}

static void test_unrelated_message_clears_code(void) {
    ct_set_error_at(CT_E_CONFIG, "model.dim", "model.dim: expected >= 0, got -1");
    ct_set_error("disk full");
    EXPECT_ERROR(CT_ERR, CT_E_NONE, "", "disk full");
    // Holding a cut copy of an earlier message is not wrapping it unless the buffer was filled.
    ct_set_error_at(CT_E_CONFIG, "model.dim", "model.dim: expected >= 0, got -1");
    ct_set_error("model.dim: expected");
    EXPECT_ERROR(CT_ERR, CT_E_NONE, "", "model.dim: expected");
}

// A caller may pass the last error's own subject and message back in, to re-code an error.
static void test_recode_with_own_subject(void) {
    ct_set_error_at(CT_E_DATA, "/ckpt/step-4/manifest.toml", "/ckpt/step-4/manifest.toml: no step");
    ct_set_error_at(CT_E_CONFIG, ct_last_error_subject(), "%s", ct_last_error());
    EXPECT_ERROR(CT_ERR, CT_E_CONFIG, "/ckpt/step-4/manifest.toml", "/ckpt/step-4/manifest.toml: no step");
}

// The subject is one line of printable text, as the message is.
static void test_subject_escaped(void) {
    ct_set_error_at(CT_E_IO, "a\nb", "cannot open");
    CHECK(!strcmp(ct_last_error_subject(), "a\\nb"), "subject '%s'", ct_last_error_subject());
}

// The code and the shared mark are separate: wrapping keeps both, and setting a code leaves the
// mark to the wrapping rule alone.
static void test_shared_mark_untouched(void) {
    ct_set_error_code(CT_E_COMM, "rank 1: timed out after 100 s");
    ct_error_mark_shared();
    ct_set_error("step 3: %s", ct_last_error());
    CHECK(ct_error_is_shared() && ct_last_error_code() == CT_E_COMM, "wrap: shared %d code %s", ct_error_is_shared(),
          ct_error_code_name(ct_last_error_code()));
    ct_set_error_code(CT_E_INTERNAL, "again: %s", ct_last_error());
    CHECK(ct_error_is_shared(), "a coded wrap dropped the mark");
    ct_set_error_code(CT_E_COMM, "rank 0: timed out");
    CHECK(!ct_error_is_shared(), "a new coded message kept the mark");
}

static void test_code_names(void) {
    static const struct {
        ct_error_code code;
        const char *name;
    } want[] = {{CT_E_NONE, "none"},       {CT_E_CONFIG, "config"}, {CT_E_DATA, "data"},
                {CT_E_IO, "io"},           {CT_E_COMM, "comm"},     {CT_E_NUMERIC, "numeric"},
                {CT_E_MEMORY, "memory"},   {CT_E_INTERNAL, "internal"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(!strcmp(ct_error_code_name(want[i].code), want[i].name), "%d: %s", (int)want[i].code,
              ct_error_code_name(want[i].code));
    CHECK(!strcmp(ct_error_code_name((ct_error_code)99), "unknown"), "out of range");
}

int main(void) {
    CT_RUN(test_code_and_subject_recorded);
    CT_RUN(test_code_survives_wrapping);
    CT_RUN(test_unrelated_message_clears_code);
    CT_RUN(test_recode_with_own_subject);
    CT_RUN(test_subject_escaped);
    CT_RUN(test_shared_mark_untouched);
    CT_RUN(test_code_names);
    CT_TEST_EXIT();
}
