#include "core/shard_desc.h"

#include "core/mathutil.h"

ct_shard_desc ct_shard_desc_make(long rows, long cols, int tp_dim, long tp_start, long tp_count) {
    ct_shard_desc d = {.global_shape = {rows, cols}, .tp_dim = tp_dim};
    if (tp_dim >= 0) {
        d.tp_start = tp_start;
        d.tp_count = tp_count;
    }
    d.flat_count = ct_shard_desc_slice_numel(&d);
    return d;
}

ct_status ct_shard_desc_tp(ct_shard_desc *d, long rows, long cols, int tp_dim, int tp_rank, int tp_size) {
    if (rows < 0 || cols < 0 || tp_dim < -1 || tp_dim > 1)
        return ct_set_error("shard_desc: bad tensor (%ld x %ld) or tp_dim %d", rows, cols, tp_dim);
    if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
        return ct_set_error("shard_desc: tp rank %d of %d", tp_rank, tp_size);
    if (tp_dim < 0) {
        *d = ct_shard_desc_make(rows, cols, -1, 0, 0);
        if (tp_size > 1) d->replicated_over = CT_DIM_BIT(CT_DIM_TP);  // every tp rank holds it whole
        return CT_OK;
    }
    long n = tp_dim == 0 ? rows : cols;
    if (n % tp_size)
        return ct_set_error("shard_desc: tp size %d does not divide %s %ld", tp_size, tp_dim == 0 ? "rows" : "cols",
                            n);
    long per = n / tp_size;
    *d = ct_shard_desc_make(rows, cols, tp_dim, (long)tp_rank * per, per);
    return CT_OK;
}

void ct_shard_desc_local_shape(const ct_shard_desc *d, long shape[2]) {
    shape[0] = d->tp_dim == 0 ? d->tp_count : d->global_shape[0];
    shape[1] = d->tp_dim == 1 ? d->tp_count : d->global_shape[1];
}

long ct_shard_desc_global_numel(const ct_shard_desc *d) { return d->global_shape[0] * d->global_shape[1]; }

long ct_shard_desc_slice_numel(const ct_shard_desc *d) {
    long s[2];
    ct_shard_desc_local_shape(d, s);
    return s[0] * s[1];
}

long ct_shard_desc_numel_local(const ct_shard_desc *d) { return d->flat_count; }

bool ct_shard_desc_valid(const ct_shard_desc *d) {
    if (d->global_shape[0] < 0 || d->global_shape[1] < 0 || d->tp_dim < -1 || d->tp_dim > 1) return false;
    if (d->tp_dim >= 0 &&
        (d->tp_start < 0 || d->tp_count < 0 || d->tp_start + d->tp_count > d->global_shape[d->tp_dim]))
        return false;
    if (d->flat_begin < 0 || d->flat_count < 0 || d->flat_begin + d->flat_count > ct_shard_desc_slice_numel(d))
        return false;
    return (d->replicated_over >> CT_DIM_COUNT) == 0;
}

// Only a column slice narrower than the tensor breaks contiguity; everything else maps local
// index e to global index base + e.
static bool column_slice(const ct_shard_desc *d) { return d->tp_dim == 1 && d->tp_count < d->global_shape[1]; }

static long contiguous_base(const ct_shard_desc *d) {
    if (d->tp_dim == 0) return d->tp_start * d->global_shape[1];
    if (d->tp_dim == 1) return d->tp_start;  // full-width "slice": tp_start is 0 when valid
    return 0;
}

long ct_shard_desc_global_index(const ct_shard_desc *d, long local) {
    long e = d->flat_begin + local;
    if (!column_slice(d)) return contiguous_base(d) + e;
    return e / d->tp_count * d->global_shape[1] + d->tp_start + e % d->tp_count;
}

long ct_shard_desc_intersect(ct_shard_desc *d, long tensor_offset, long lo, long hi, long *pos_in_range) {
    long a = ct_max_l(tensor_offset + d->flat_begin, lo);
    long b = ct_min_l(tensor_offset + d->flat_begin + d->flat_count, hi);
    if (a >= b) {
        d->flat_begin = d->flat_count = 0;
        if (pos_in_range) *pos_in_range = 0;
        return 0;
    }
    d->flat_begin = a - tensor_offset;
    d->flat_count = b - a;
    if (pos_in_range) *pos_in_range = a - lo;
    return d->flat_count;
}

bool ct_shard_next_run(const ct_shard_desc *d, ct_shard_iter *it, ct_shard_run *run) {
    long left = d->flat_count - it->pos;
    if (left <= 0) return false;
    long e = d->flat_begin + it->pos;
    run->local = it->pos;
    if (column_slice(d)) {
        long col = e % d->tp_count;
        run->global = e / d->tp_count * d->global_shape[1] + d->tp_start + col;
        run->len = ct_min_l(d->tp_count - col, left);  // to the end of this row of the slice
    } else {
        run->global = contiguous_base(d) + e;
        run->len = left;
    }
    it->pos += run->len;
    return true;
}

bool ct_shard_desc_owns_copy(const ct_shard_desc *d, const int coord[CT_DIM_COUNT]) {
    for (int k = 0; k < CT_DIM_COUNT; k++)
        if ((d->replicated_over & CT_DIM_BIT(k)) && coord[k] != 0) return false;
    return true;
}
