// Fuzz target: safetensors files (checkpoint/safetensors.c) and the model file built on them
// (checkpoint/model_file.c: the dimensions in __metadata__, then every tensor checked against
// the registry those dimensions give), the file `ctitan generate | eval` and an initial load
// read. The input is written to a file and opened as one.
//
// Properties beyond "no crash, no leak, no UB, no allocation over libFuzzer's limit": every
// tensor ct_st_open accepts lies inside the file with exactly shape x dtype-size bytes, can be
// found by its name, and reads (when F32/BF16/F16) without error.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/model_file.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "fuzz_util.h"

static void check_file(const char *path, size_t file_size) {
    ct_st_file *f = ct_st_open(path);
    if (!f) return;
    int n = ct_st_num_tensors(f);
    ct_fuzz_check(n >= 0, "%d tensors", n);
    float buf[256];
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_tensor_at(f, i);
        ct_fuzz_check(t && t->name, "tensor %d", i);
        ct_fuzz_check(ct_st_find(f, t->name) != NULL, "'%s' not found by name", t->name);
        ct_fuzz_check(t->ndim >= 0 && t->ndim <= CT_ST_MAX_DIMS, "'%s': %d dims", t->name, t->ndim);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            ct_fuzz_check(t->shape[d] >= 0, "'%s': dim %d is %lld", t->name, d, (long long)t->shape[d]);
            numel *= t->shape[d];  // bounded: the bytes are checked against the file below
        }
        ct_fuzz_check(numel == t->numel, "'%s': numel %lld, shape gives %lld", t->name, (long long)t->numel,
                      (long long)numel);
        ct_fuzz_check(t->begin <= t->end && t->end <= file_size, "'%s': bytes [%llu, %llu) in a file of %zu", t->name,
                      (unsigned long long)t->begin, (unsigned long long)t->end, file_size);
        ct_fuzz_check(t->end - t->begin == (uint64_t)t->numel * ct_dtype_size(t->dtype),
                      "'%s': %llu bytes for %lld elements of %s", t->name, (unsigned long long)(t->end - t->begin),
                      (long long)t->numel, ct_st_dtype_name(t->dtype));
        if (t->dtype == CT_F32 || t->dtype == CT_BF16 || t->dtype == CT_F16) {
            for (int64_t b = 0; b < t->numel; b += 256) {
                int64_t k = t->numel - b < 256 ? t->numel - b : 256;
                ct_fuzz_check(ct_st_read_f32_range(t, b, k, buf) == CT_OK, "'%s' [%lld, +%lld): %s", t->name,
                              (long long)b, (long long)k, ct_last_error());
            }
        }
    }
    for (int i = 0; i < ct_st_num_metadata(f); i++) {
        const char *key = ct_st_metadata_key(f, i);
        ct_fuzz_check(key && ct_st_metadata(f, key), "metadata %d", i);
    }
    ct_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[1024];
    ct_fuzz_write("model.safetensors", data, size, path, sizeof path);
    check_file(path, size);

    ct_model_config m;
    if (ct_model_load_config(path, &m) != CT_OK) return 0;
    ct_param_table t;
    float *full = NULL;
    if (ct_model_load_all(path, &m, &t, &full) == CT_OK) {
        // Partial reads, as each rank of a sharded run does: open against the same registry.
        ct_model_file *mf = ct_model_open(path, &t);
        ct_fuzz_check(mf != NULL, "loads whole but does not open: %s", ct_last_error());
        float x[64];
        for (int i = 0; i < t.count; i++) {
            const ct_param *p = &t.params[i];
            long k = p->numel < 64 ? p->numel : 64;
            ct_model_read_range(mf, p, p->numel - k, k, x);
            ct_fuzz_check(!memcmp(x, full + p->offset + p->numel - k, (size_t)k * sizeof(float)),
                          "'%s': a partial read differs from the whole load", p->name);
        }
        ct_model_close(mf);
        free(full);
        ct_param_table_free(&t);
    }
    return 0;
}
