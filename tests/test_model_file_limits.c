// Hostile model files: counts and shapes that would make the reader allocate without bound or
// overflow its arithmetic are refused, with one line naming the file and the key, before
// anything is allocated for them.
//  - safetensors: a shape whose byte count wraps (2^62 F32 elements in an empty data section);
//  - model file metadata: n_layers of 2 million (a 272-byte file once made ctitan allocate
//    3.3 GB) and near INT_MAX, a vocabulary of 2e9, dimensions the file's tensors cannot hold,
//    a layer count that disagrees with the tensors; the parameter registry itself refuses a
//    layer count whose tensor count overflows int;
//  - "out of memory" names the parameter count it could not allocate.
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/model_file.h"
#include "checkpoint/safetensors.h"
#include "fatal_child.h"
#include "model/params.h"
#include "test.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[8][128];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

// u64 header length + header + data bytes, exactly as given.
static const char *write_raw(const char *name, const char *header, const void *data, size_t data_bytes) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    uint64_t hlen = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, hlen, f);
    if (data_bytes) fwrite(data, 1, data_bytes, f);
    fclose(f);
    return p;
}

static int contains(const char *msg, const char *a, const char *b) {
    return strstr(msg, a) && (!b || strstr(msg, b)) && !strchr(msg, '\n');
}

// ---------------------------------------------------------------- safetensors (finding 10)

static void test_st_shape_byte_count_wraps(void) {
    // 2^62 F32 elements = 2^64 bytes, which wraps to 0 = the empty data offsets.
    const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}";
    const char *p = write_raw("wrap.st", h, NULL, 0);
    ct_st_file *f = ct_st_open(p);
    CHECK(!f, "a 2^62-element F32 tensor in an empty data section opened");
    if (f) ct_st_close(f);
    else CHECK(contains(ct_last_error(), p, "x"), "message: %s", ct_last_error());
    // The same with F64 (2^61 x 8) and with the product of two dimensions wrapping.
    const char *h2 = "{\"y\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}";
    f = ct_st_open(write_raw("wrap64.st", h2, NULL, 0));
    CHECK(!f, "2^61 F64 elements opened");
    if (f) ct_st_close(f);
    const char *h3 = "{\"z\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}";
    f = ct_st_open(write_raw("wrap2d.st", h3, NULL, 0));
    CHECK(!f, "2^31 x 2^31 F32 elements opened");
    if (f) ct_st_close(f);
    // A zero dimension is a legal empty tensor, whatever the others say.
    const char *h4 = "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904],\"data_offsets\":[0,0]}}";
    f = ct_st_open(write_raw("empty.st", h4, NULL, 0));
    CHECK(f != NULL, "an empty tensor with a zero dimension refused: %s", ct_last_error());
    if (f) ct_st_close(f);
}

// ---------------------------------------------------------------- model file metadata (finding 4)

// A model file's metadata with the given overrides (NULL: the tiny model's value) and the
// tensors of a real 2-layer model of dim 8 (so only the metadata lies).
typedef struct {
    const char *n_layers, *dim, *vocab_size, *ffn_hidden, *n_heads, *n_kv_heads, *max_seq_len;
} meta_over;

static const char *write_model(const char *name, meta_over o, int with_tensors) {
    ct_model_config m = {0};
    strcpy(m.flavor, "test");
    m.dim = 8;
    m.n_layers = 2;
    m.n_heads = 2;
    m.n_kv_heads = 2;
    m.head_dim = 4;
    m.ffn_hidden = 16;
    m.vocab_size = 10;
    m.norm_eps = 1e-5;
    m.rope_theta = 10000;
    m.max_seq_len = 16;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = calloc((size_t)t.total, sizeof(float));
    const char *real = tmp_path("real.safetensors");
    CHECK(ct_model_save(real, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    // Re-write with the lying metadata (the tensors copied from the real file).
    ct_st_file *rf = ct_st_open(real);
    ct_st_writer *w = ct_st_writer_new();
    char keys[][16] = {"format", "flavor", "dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                       "ffn_hidden", "norm_eps", "rope_theta", "rope_scaling", "max_seq_len"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = ct_st_metadata(rf, keys[i]);
#define OVER(field) \
    if (!strcmp(keys[i], #field) && o.field) v = o.field
        OVER(n_layers);
        OVER(dim);
        OVER(vocab_size);
        OVER(ffn_hidden);
        OVER(n_heads);
        OVER(n_kv_heads);
        OVER(max_seq_len);
#undef OVER
        ct_st_writer_metadata(w, keys[i], v);
    }
    float *copies[64];
    int nc = 0;
    for (int i = 0; with_tensors && i < ct_st_num_tensors(rf); i++) {
        const ct_st_tensor *x = ct_st_tensor_at(rf, i);
        copies[nc] = malloc((size_t)x->numel * sizeof(float) + 1);
        ct_st_read_f32(rf, x->name, copies[nc], x->numel);
        ct_st_writer_add(w, x->name, CT_F32, x->ndim, x->shape, CT_F32, copies[nc]);
        nc++;
    }
    const char *p = tmp_path(name);
    CHECK(ct_st_writer_write(w, p) == CT_OK, "%s", ct_last_error());
    ct_st_writer_free(w);
    for (int i = 0; i < nc; i++) free(copies[i]);
    ct_st_close(rf);
    free(block);
    ct_param_table_free(&t);
    return p;
}

// ct_model_load_config must refuse, naming the file and `key`.
static void expect_config_refused(const char *p, const char *key) {
    ct_model_config m;
    ct_status st = ct_model_load_config(p, &m);
    CHECK(st == CT_ERR, "%s: metadata with a bad %s accepted (n_layers %d, dim %d, vocab %d)", p, key, m.n_layers,
          m.dim, m.vocab_size);
    if (st == CT_ERR) CHECK(contains(ct_last_error(), p, key), "message: %s", ct_last_error());
}

static void test_model_sane_file_loads(void) {
    const char *p = write_model("sane.safetensors", (meta_over){0}, 1);
    ct_model_config m;
    ct_param_table t;
    float *full;
    CHECK(ct_model_load_all(p, &m, &t, &full) == CT_OK, "%s", ct_last_error());
    if (full) {
        free(full);
        ct_param_table_free(&t);
    }
}

static void test_model_two_million_layers(void) {
    expect_config_refused(write_model("layers2m.safetensors", (meta_over){.n_layers = "2000000"}, 0), "n_layers");
    expect_config_refused(write_model("layers2m_t.safetensors", (meta_over){.n_layers = "2000000"}, 1), "n_layers");
}

static void test_model_layers_near_int_max(void) {
    expect_config_refused(write_model("layersmax.safetensors", (meta_over){.n_layers = "2147483647"}, 1), "n_layers");
    expect_config_refused(write_model("layers9.safetensors", (meta_over){.n_layers = "238609295"}, 1), "n_layers");
}

static void test_model_huge_vocab(void) {
    expect_config_refused(write_model("vocab.safetensors", (meta_over){.vocab_size = "2000000000"}, 1), "vocab_size");
}

static void test_model_dims_beyond_tensors(void) {
    // Within every hard limit, but the file's tensors hold far fewer elements than these
    // dimensions need (so loading would allocate for parameters that are not there).
    expect_config_refused(write_model("dim.safetensors", (meta_over){.dim = "8192", .n_heads = "64", .n_kv_heads = "8"}, 1),
                          "dim");
    expect_config_refused(write_model("ffn.safetensors", (meta_over){.ffn_hidden = "1000000"}, 1), "ffn_hidden");
    // One layer more or less than the tensors describe.
    expect_config_refused(write_model("l3.safetensors", (meta_over){.n_layers = "3"}, 1), "n_layers");
    expect_config_refused(write_model("l1.safetensors", (meta_over){.n_layers = "1"}, 1), "n_layers");
}

static void test_model_huge_max_seq_len(void) {
    expect_config_refused(write_model("seq.safetensors", (meta_over){.max_seq_len = "2000000000"}, 1), "max_seq_len");
}

// ct_model_load_all with 1 GiB of address space beyond what is mapped: the metadata must be
// refused before anything is allocated for it (today's code sized the registry from it: 3.3 GB).
static void load_all_limited(void *vpath) {
    ct_test_limit_address_space(1ul << 30);
    ct_model_config m;
    ct_param_table t;
    float *full;
    if (ct_model_load_all(vpath, &m, &t, &full) == CT_OK) {
        fprintf(stderr, "loaded\n");
        _exit(0);
    }
    fprintf(stderr, "%s\n", ct_last_error());
    _exit(3);
}

static void test_model_load_all_allocates_nothing_first(void) {
    const char *p = write_model("alloc.safetensors", (meta_over){.n_layers = "2000000"}, 0);
    char buf[2048];
    int rc = ct_test_run_fatal(load_all_limited, (void *)p, buf, sizeof buf);
    CHECK(rc == 3 && strstr(buf, p) && strstr(buf, "n_layers"), "exit %d: %s", rc, buf);
}

// The registry refuses what it cannot index (a caller that skipped the checks): one line
// naming n_layers, not a wrapped multiply and a calloc of hundreds of GB.
static void build_table(void *vl) {
    ct_model_config m = {0};
    m.dim = 8;
    m.n_layers = *(int *)vl;
    m.n_heads = m.n_kv_heads = 2;
    m.head_dim = 4;
    m.ffn_hidden = 16;
    m.vocab_size = 10;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    _exit(0);
}

static void test_params_layer_count_overflow(void) {
    int layers[] = {INT_MAX, INT_MAX / 9 + 1};
    for (int i = 0; i < 2; i++) {
        char buf[1024];
        int rc = ct_test_run_fatal(build_table, &layers[i], buf, sizeof buf);
        CHECK(rc == 1 && strstr(buf, "n_layers") && !strstr(buf, "out of memory"), "n_layers %d: exit %d: %s",
              layers[i], rc, buf);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_mflimits_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    CT_RUN(test_st_shape_byte_count_wraps);
    CT_RUN(test_model_sane_file_loads);
    CT_RUN(test_model_two_million_layers);
    CT_RUN(test_model_layers_near_int_max);
    CT_RUN(test_model_huge_vocab);
    CT_RUN(test_model_dims_beyond_tensors);
    CT_RUN(test_model_huge_max_seq_len);
    CT_RUN(test_model_load_all_allocates_nothing_first);
    CT_RUN(test_params_layer_count_overflow);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}
