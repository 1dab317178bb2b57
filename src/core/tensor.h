// Tensor views: a pointer that knows its element type, the device its memory lives on, and a
// 2-D row-major shape with a leading dimension. A view owns nothing -- buffers come from
// core/memory.h (or a backend) and outlive the views cut from them -- so views are passed and
// returned by value, and slicing one allocates nothing.
//
// Layout: element (r, c) is at data + (r * ld + c) * ct_dtype_size(dtype), with ld >= cols.
// ld > cols describes a block of columns cut from a wider matrix (a tp slice of a weight, the
// q part of a fused qkv output).
//
// Higher ranks fold into the two: an activation (B, T, C) is the view (B*T, C); a weight
// (OC, IC) is (OC, IC). A 1-D vector of n elements is a COLUMN, (n, 1) with ld 1, so that
// ct_tensor_slice_rows cuts element ranges out of it (an FSDP shard of a flat buffer) exactly as
// it cuts rows out of a matrix.
//
// The helpers compute addresses only: they never touch the memory, so they are as valid for a
// GPU pointer as for a host one. Out-of-range slices are fatal: a wrong view is a bug, and
// finding it at the cut is cheaper than finding it in the numbers.
#ifndef CT_TENSOR_H
#define CT_TENSOR_H
#include <stdbool.h>
#include <stddef.h>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

typedef struct {
    void *data;        // element (0, 0)
    ct_dtype dtype;
    ct_device device;  // where data lives
    long rows, cols;   // logical shape
    long ld;           // elements from one row's start to the next's; >= cols
} ct_tensor;

// A dense (rows, cols) view: ld = cols.
static inline ct_tensor ct_tensor_make(void *data, ct_dtype dtype, ct_device device, long rows,
                                       long cols) {
    return (ct_tensor){data, dtype, device, rows, cols, cols};
}

// A (rows, cols) view whose rows are ld elements apart.
static inline ct_tensor ct_tensor_make_strided(void *data, ct_dtype dtype, ct_device device,
                                               long rows, long cols, long ld) {
    if (rows < 0 || cols < 0 || ld < cols)
        ct_fatal("tensor", "bad view shape (%ld, %ld) with ld %ld", rows, cols, ld);
    return (ct_tensor){data, dtype, device, rows, cols, ld};
}

// A vector of n elements: the column (n, 1), ld 1.
static inline ct_tensor ct_tensor_make_1d(void *data, ct_dtype dtype, ct_device device, long n) {
    return (ct_tensor){data, dtype, device, n, 1, 1};
}

static inline long ct_tensor_numel(ct_tensor t) { return t.rows * t.cols; }

// True when the elements are one gap-free run (a single row counts, whatever its ld).
static inline bool ct_tensor_is_contiguous(ct_tensor t) { return t.ld == t.cols || t.rows <= 1; }

// Bytes of the elements themselves: what a dense copy of the view needs.
static inline size_t ct_tensor_bytes(ct_tensor t) {
    return (size_t)ct_tensor_numel(t) * ct_dtype_size(t.dtype);
}

// Bytes from data to just past the last element, gaps between rows included: the extent of
// memory the view reaches. Equals ct_tensor_bytes for a contiguous view; 0 for an empty one.
static inline size_t ct_tensor_span_bytes(ct_tensor t) {
    if (t.rows <= 0 || t.cols <= 0) return 0;
    return (size_t)((t.rows - 1) * t.ld + t.cols) * ct_dtype_size(t.dtype);
}

// Address of row r's first element (r may equal rows: the end of the view).
static inline void *ct_tensor_row(ct_tensor t, long r) {
    return (char *)t.data + (size_t)r * (size_t)t.ld * ct_dtype_size(t.dtype);
}

// Rows [r0, r0 + n) as a view of the same memory, same ld.
static inline ct_tensor ct_tensor_slice_rows(ct_tensor t, long r0, long n) {
    if (r0 < 0 || n < 0 || r0 + n > t.rows)
        ct_fatal("tensor", "rows [%ld, %ld) are outside a (%ld, %ld) view", r0, r0 + n, t.rows, t.cols);
    ct_tensor s = t;
    s.data = ct_tensor_row(t, r0);
    s.rows = n;
    return s;
}

// Columns [c0, c0 + n) as a view of the same memory: same rows, same ld (so not contiguous
// unless it is every column or a single row).
static inline ct_tensor ct_tensor_slice_cols(ct_tensor t, long c0, long n) {
    if (c0 < 0 || n < 0 || c0 + n > t.cols)
        ct_fatal("tensor", "columns [%ld, %ld) are outside a (%ld, %ld) view", c0, c0 + n, t.rows, t.cols);
    ct_tensor s = t;
    s.data = (char *)t.data + (size_t)c0 * ct_dtype_size(t.dtype);
    s.cols = n;
    return s;
}
#endif
