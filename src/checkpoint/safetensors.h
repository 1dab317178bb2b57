// safetensors files (the format of Hugging Face's `safetensors` library), written and read:
//   u64 little-endian N | N bytes of JSON header | data section
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte
// offsets into the data section) plus an optional "__metadata__" object of string pairs. We
// pad the header with spaces so the data section starts 8-byte aligned.
#ifndef CT_SAFETENSORS_H
#define CT_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/float_formats.h"
#include "core/error.h"

enum { CT_ST_MAX_DIMS = 8 };

const char *ct_st_dtype_name(ct_dtype d);  // the format's name: "F32", "BF16", ... ("?" for none)

// Narrowing and widening of values (bf16, f16) are core/float_formats.h's.

// ---- writing --------------------------------------------------------------------------------
// Entries are collected (the data pointers must stay valid until ct_st_writer_write), then
// written in one pass to path.tmp, which is renamed to path when complete.
typedef struct ct_st_writer ct_st_writer;
ct_st_writer *ct_st_writer_new(void);
void ct_st_writer_free(ct_st_writer *w);
void ct_st_writer_metadata(ct_st_writer *w, const char *key, const char *value);
// Adds a tensor stored as `file_dtype` from `data` of `data_dtype`. Equal dtypes copy bytes;
// F32 data into a BF16 file is converted (round to nearest even). Other pairs are refused.
ct_status ct_st_writer_add(ct_st_writer *w, const char *name, ct_dtype file_dtype, int ndim, const int64_t *shape,
                           ct_dtype data_dtype, const void *data);
ct_status ct_st_writer_write(ct_st_writer *w, const char *path);

// Streaming, for files larger than memory: declare every tensor first with ct_st_writer_add
// and data NULL (its data_dtype says what append will be given), then
//   ct_st_writer_begin(w, path)    writes the header to path.tmp,
//   ct_st_writer_append(w, x, n)   n more elements, in declaration order, in pieces of any size
//                                  (a piece may run over into the next tensors),
//   ct_st_writer_finish(w)         refuses a stream with elements missing; fsync, rename to path.
// Memory is the header and one 16 KiB conversion buffer. ct_st_writer_free on a stream that
// was not finished removes path.tmp.
ct_status ct_st_writer_begin(ct_st_writer *w, const char *path);
ct_status ct_st_writer_append(ct_st_writer *w, const void *data, int64_t n);
ct_status ct_st_writer_finish(ct_st_writer *w);

// ---- reading --------------------------------------------------------------------------------
typedef struct {
    char *name;
    ct_dtype dtype;
    int ndim;
    int64_t shape[CT_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;  // byte offsets in the data section
    const void *data;     // inside the mapping
} ct_st_tensor;

typedef struct ct_st_file ct_st_file;
// Maps and validates a file. NULL + ct_last_error ("path: reason") on any problem: truncated
// file, header length too large, bad JSON, unknown dtype, offsets out of range or overlapping,
// byte size != shape x dtype size.
ct_st_file *ct_st_open(const char *path);
void ct_st_close(ct_st_file *f);
int ct_st_num_tensors(const ct_st_file *f);
const ct_st_tensor *ct_st_tensor_at(const ct_st_file *f, int i);  // in header order
const ct_st_tensor *ct_st_find(const ct_st_file *f, const char *name);  // NULL if absent
int ct_st_num_metadata(const ct_st_file *f);
const char *ct_st_metadata_key(const ct_st_file *f, int i);
const char *ct_st_metadata(const ct_st_file *f, const char *key);  // NULL if absent
// Copies tensor `name` into out (numel floats), converting from F32/BF16/F16. CT_ERR if the
// tensor is absent, has another element count than `numel`, or another dtype.
ct_status ct_st_read_f32(const ct_st_file *f, const char *name, float *out, int64_t numel);
// Elements [begin, begin + n) of t's flattened data into out, widened to fp32 (F32/BF16/F16).
// CT_ERR for a range outside the tensor or another dtype.
ct_status ct_st_read_f32_range(const ct_st_tensor *t, int64_t begin, int64_t n, float *out);
// Lets go of the mapped pages under elements [begin, begin + n) of t (madvise DONTNEED, whole
// pages, so a neighbour's edge may go too): they leave this process's resident memory, stay in
// the page cache, and a later read faults them back in. A reader that streams through a file
// larger than memory calls it after each piece.
void ct_st_release(const ct_st_file *f, const ct_st_tensor *t, int64_t begin, int64_t n);
#endif
