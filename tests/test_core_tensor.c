// Tests of core/tensor.h (views: shape, strides, slices) and core/device.h.
#include <stdint.h>
#include <string.h>

#include "core/tensor.h"
#include "fatal_child.h"
#include "test.h"


static void test_device(void) {
    ct_device h = CT_HOST, g1 = {CT_DEVICE_CUDA, 1}, g0 = {CT_DEVICE_CUDA, 0};
    CHECK(strcmp(ct_device_kind_name(CT_DEVICE_CPU), "cpu") == 0, "cpu");
    CHECK(strcmp(ct_device_kind_name(CT_DEVICE_CUDA), "cuda") == 0, "cuda");
    CHECK(strcmp(ct_device_kind_name((ct_device_kind)7), "?") == 0, "unknown kind");
    CHECK(ct_device_equal(h, CT_HOST) && !ct_device_equal(g0, g1) && !ct_device_equal(h, g0), "equal");
    char s[16];
    CHECK(ct_device_format(h, s, sizeof s) == 3 && strcmp(s, "cpu") == 0, "%s", s);
    CHECK(ct_device_format(g1, s, sizeof s) == 6 && strcmp(s, "cuda:1") == 0, "%s", s);
    char tiny[4];
    CHECK(ct_device_format(g1, tiny, sizeof tiny) == 6 && strcmp(tiny, "cud") == 0, "truncation %s", tiny);
}

static void test_make_and_sizes(void) {
    float a[6 * 5];  // (6, 5)
    ct_tensor t = ct_tensor_make(a, CT_F32, CT_HOST, 6, 5);
    CHECK(t.data == a && t.dtype == CT_F32 && ct_device_equal(t.device, CT_HOST), "fields");
    CHECK(t.rows == 6 && t.cols == 5 && t.ld == 5, "shape %ld %ld %ld", t.rows, t.cols, t.ld);
    CHECK(ct_tensor_numel(t) == 30, "numel");
    CHECK(ct_tensor_bytes(t) == 120 && ct_tensor_span_bytes(t) == 120, "bytes");
    CHECK(ct_tensor_is_contiguous(t), "dense is contiguous");

    uint16_t b[4 * 8];  // bf16 (4, 8), viewed as its first 3 columns
    ct_tensor s = ct_tensor_make_strided(b, CT_BF16, CT_HOST, 4, 3, 8);
    CHECK(ct_tensor_numel(s) == 12 && ct_tensor_bytes(s) == 24, "strided bytes %zu", ct_tensor_bytes(s));
    CHECK(ct_tensor_span_bytes(s) == (size_t)(3 * 8 + 3) * 2, "span %zu", ct_tensor_span_bytes(s));
    CHECK(!ct_tensor_is_contiguous(s), "a column block is not contiguous");
    CHECK(ct_tensor_is_contiguous(ct_tensor_slice_rows(s, 2, 1)), "one row is contiguous");

    ct_tensor e = ct_tensor_make(a, CT_F32, CT_HOST, 0, 5);
    CHECK(ct_tensor_numel(e) == 0 && ct_tensor_bytes(e) == 0 && ct_tensor_span_bytes(e) == 0, "empty");
}

static void test_vector_is_a_column(void) {
    int32_t v[10];
    for (int i = 0; i < 10; i++) v[i] = i;
    ct_tensor t = ct_tensor_make_1d(v, CT_I32, CT_HOST, 10);
    CHECK(t.rows == 10 && t.cols == 1 && t.ld == 1, "shape");
    CHECK(ct_tensor_numel(t) == 10 && ct_tensor_bytes(t) == 40 && ct_tensor_is_contiguous(t), "sizes");
    // An FSDP-style shard: elements [4, 7).
    ct_tensor s = ct_tensor_slice_rows(t, 4, 3);
    CHECK(s.data == &v[4] && ct_tensor_numel(s) == 3 && ct_tensor_bytes(s) == 12, "slice");
    CHECK(*(int32_t *)ct_tensor_row(s, 2) == 6, "last element of the slice");
}

static void test_rows_and_slices(void) {
    double m[5 * 7];  // (5, 7)
    for (int i = 0; i < 35; i++) m[i] = i;
    ct_tensor t = ct_tensor_make(m, CT_F64, CT_HOST, 5, 7);
    for (long r = 0; r <= 5; r++) CHECK(ct_tensor_row(t, r) == (void *)&m[r * 7], "row %ld", r);

    ct_tensor rs = ct_tensor_slice_rows(t, 1, 3);  // rows 1..3
    CHECK(rs.rows == 3 && rs.cols == 7 && rs.ld == 7 && rs.data == &m[7], "row slice");
    CHECK(((double *)ct_tensor_row(rs, 2))[0] == 21, "row 2 of the slice is row 3");

    ct_tensor cs = ct_tensor_slice_cols(t, 2, 4);  // columns 2..5: a tp slice
    CHECK(cs.rows == 5 && cs.cols == 4 && cs.ld == 7 && cs.data == &m[2], "col slice");
    CHECK(((double *)ct_tensor_row(cs, 3))[1] == 3 * 7 + 3, "(3, 1) of the slice is (3, 3)");
    CHECK(!ct_tensor_is_contiguous(cs), "col slice not contiguous");

    // Slices compose: rows 2..3 of columns 2..5; its (0, 0) is the original (2, 2).
    ct_tensor both = ct_tensor_slice_rows(ct_tensor_slice_cols(t, 2, 4), 2, 2);
    CHECK(both.data == &m[2 * 7 + 2] && both.ld == 7 && both.rows == 2 && both.cols == 4, "compose");
    CHECK(ct_tensor_span_bytes(both) == (size_t)(7 + 4) * 8, "span %zu", ct_tensor_span_bytes(both));

    // Empty slices at either end are views too.
    CHECK(ct_tensor_slice_rows(t, 5, 0).rows == 0 && ct_tensor_slice_cols(t, 0, 0).cols == 0, "empty");
    // Device and dtype travel with every slice (addresses only: a GPU pointer is never touched).
    ct_tensor g = ct_tensor_make((void *)(uintptr_t)0x1000, CT_BF16, (ct_device){CT_DEVICE_CUDA, 2}, 8, 8);
    ct_tensor gs = ct_tensor_slice_cols(ct_tensor_slice_rows(g, 4, 2), 2, 2);
    CHECK(gs.dtype == CT_BF16 && gs.device.kind == CT_DEVICE_CUDA && gs.device.index == 2, "device kept");
    CHECK((uintptr_t)gs.data == 0x1000 + (4 * 8 + 2) * 2, "gpu address arithmetic");
}

static void slice_rows_past_end(void *arg) {
    float a[12];
    ct_tensor t = ct_tensor_make(a, CT_F32, CT_HOST, 4, 3);
    ct_tensor_slice_rows(t, 2, 3);
}
static void slice_cols_negative(void *arg) {
    float a[12];
    ct_tensor t = ct_tensor_make(a, CT_F32, CT_HOST, 4, 3);
    ct_tensor_slice_cols(t, -1, 2);
}
static void strided_ld_too_small(void *arg) {
    float a[12];
    ct_tensor_make_strided(a, CT_F32, CT_HOST, 4, 3, 2);
}

static void test_bad_views_are_fatal(void) {
    char err[512];
    int rc = ct_test_run_fatal(slice_rows_past_end, NULL, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "tensor: rows [2, 5) are outside a (4, 3) view"), "rc %d: %s", rc, err);
    rc = ct_test_run_fatal(slice_cols_negative, NULL, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "tensor: columns [-1, 1) are outside a (4, 3) view"), "rc %d: %s", rc, err);
    rc = ct_test_run_fatal(strided_ld_too_small, NULL, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "tensor: bad view shape (4, 3) with ld 2"), "rc %d: %s", rc, err);
}

int main(void) {
    CT_RUN(test_device);
    CT_RUN(test_make_and_sizes);
    CT_RUN(test_vector_is_a_column);
    CT_RUN(test_rows_and_slices);
    CT_RUN(test_bad_views_are_fatal);
    CT_TEST_EXIT();
}
