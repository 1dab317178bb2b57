// The device mesh: layout arithmetic (pure) and the communicators made from it.
#include "comm/mesh.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const dim_names[CT_MESH_NDIMS] = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};

ct_mesh_layout ct_mesh_layout_from_config(const ct_config *c) {
    ct_mesh_layout l;
    l.degree[CT_MESH_PP] = c->pipeline_degree;
    l.degree[CT_MESH_DP_REPLICATE] = c->data_replicate_degree;
    l.degree[CT_MESH_DP_SHARD] = c->data_shard_degree;
    l.degree[CT_MESH_CP] = c->context_extension_degree;
    l.degree[CT_MESH_TP] = c->compute_parallel_degree;
    return l;
}

int ct_mesh_layout_format(const ct_mesh_layout *l, char *buf, size_t n) {
    int len = 0;
    if (n) buf[0] = '\0';
    for (int d = 0; d < CT_MESH_NDIMS; d++) {
        size_t off = (size_t)len < n ? (size_t)len : n;
        len += snprintf(buf + off, n - off, "%s%s %d", d ? " × " : "", dim_names[d], l->degree[d]);
    }
    return len;
}

// Writes the refusal into err and the thread's last error; returns CT_ERR.
static ct_status refuse(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ct_status refuse(char *err, size_t errlen, const char *fmt, ...) {
    char line[CT_MESH_ERR_LEN * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (err && errlen) snprintf(err, errlen, "%s", line);
    return ct_set_error("%s", line);
}

ct_status ct_mesh_resolve(const ct_mesh_layout *want, int world, ct_mesh_layout *out, char *err,
                          size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (world < 1) return refuse(err, errlen, "layout: world size must be >= 1, got %d", world);
    for (int d = 0; d < CT_MESH_NDIMS; d++) {
        int v = want->degree[d];
        if (d == CT_MESH_DP_SHARD && v == -1) continue;
        if (v < 1)
            return refuse(err, errlen, "layout: %s degree must be >= 1%s, got %d", dim_names[d],
                          d == CT_MESH_DP_SHARD ? " (or -1: whatever ranks are left)" : "", v);
    }
    char desc[CT_MESH_ERR_LEN];
    ct_mesh_layout_format(want, desc, sizeof desc);
    // Products in double: exact while they could still equal an int world size, and no
    // overflow for absurd degrees.
    double others = 1;
    for (int d = 0; d < CT_MESH_NDIMS; d++)
        if (d != CT_MESH_DP_SHARD) others *= want->degree[d];
    ct_mesh_layout r = *want;
    if (want->degree[CT_MESH_DP_SHARD] == -1) {
        if (others > world || world % (long long)others != 0)
            return refuse(err, errlen,
                          "layout %s: the other degrees make %.0f ranks, which does not divide "
                          "the world of %d",
                          desc, others, world);
        r.degree[CT_MESH_DP_SHARD] = (int)(world / (long long)others);
    }
    double total = others * r.degree[CT_MESH_DP_SHARD];
    if (total != (double)world)
        return refuse(err, errlen, "layout %s = %.0f ranks, but the world has %d", desc, total, world);
    *out = r;
    return CT_OK;
}

void ct_mesh_coords(const ct_mesh_layout *l, int rank, int coord[CT_MESH_NDIMS]) {
    for (int d = CT_MESH_NDIMS - 1; d >= 0; d--) {
        coord[d] = rank % l->degree[d];
        rank /= l->degree[d];
    }
}

int ct_mesh_rank(const ct_mesh_layout *l, const int coord[CT_MESH_NDIMS]) {
    int r = 0;
    for (int d = 0; d < CT_MESH_NDIMS; d++) r = r * l->degree[d] + coord[d];
    return r;
}

int ct_mesh_mask_size(const ct_mesh_layout *l, unsigned mask) {
    int n = 1;
    for (int d = 0; d < CT_MESH_NDIMS; d++)
        if (mask & (1u << d)) n *= l->degree[d];
    return n;
}

void ct_mesh_group_position(const ct_mesh_layout *l, int rank, unsigned mask, int *color,
                           int *key) {
    int coord[CT_MESH_NDIMS];
    ct_mesh_coords(l, rank, coord);
    int c = 0, k = 0;
    for (int d = 0; d < CT_MESH_NDIMS; d++) {
        if (mask & (1u << d))
            k = k * l->degree[d] + coord[d];
        else
            c = c * l->degree[d] + coord[d];
    }
    *color = c;
    *key = k;
}

static ct_status split(ct_group *world, const ct_mesh_layout *l, unsigned mask, const char *name,
                       ct_group *out) {
    int color, key;
    ct_mesh_group_position(l, world->rank, mask, &color, &key);
    if (ct_comm_group_split(world, color, key, name, out) != CT_OK) return CT_ERR;
    // The split orders by key, so the group rank must be the key; anything else is a bug here.
    if (out->rank != key || out->size != ct_mesh_mask_size(l, mask))
        return ct_set_error("mesh: group %s has rank %d of %d, expected %d of %d", name, out->rank,
                            out->size, key, ct_mesh_mask_size(l, mask));
    return CT_OK;
}

ct_status ct_mesh_create(ct_group *world, const ct_mesh_layout *want, ct_mesh *out) {
    memset(out, 0, sizeof *out);
    char err[CT_MESH_ERR_LEN];
    if (ct_mesh_resolve(want, world->size, &out->layout, err, sizeof err) != CT_OK) return CT_ERR;
    out->world_rank = world->rank;
    out->world_size = world->size;
    ct_mesh_coords(&out->layout, world->rank, out->coord);
    for (int d = 0; d < CT_MESH_NDIMS; d++)
        if (split(world, &out->layout, 1u << d, dim_names[d], &out->dim[d]) != CT_OK) goto fail;
    if (split(world, &out->layout, CT_MESH_MASK_FSDP, "fsdp", &out->fsdp) != CT_OK) goto fail;
    if (split(world, &out->layout, CT_MESH_MASK_DP, "dp", &out->dp) != CT_OK) goto fail;
    if (split(world, &out->layout, CT_MESH_MASK_DP_CP, "dp_cp", &out->dp_cp) != CT_OK) goto fail;
    return CT_OK;
fail:;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", ct_last_error());
    ct_mesh_free(out);
    return ct_set_error("%s", keep);
}

ct_status ct_mesh_create_experts(ct_mesh *m, int ep) {
    ct_group *f = &m->fsdp;
    if (ep < 1 || f->size % ep)
        return ct_set_error("parallelism.expert_parallel_degree %d must divide data_shard_degree %d x "
                            "context_parallel_degree %d = %d: expert parallelism borrows its ranks from data sharding",
                            ep, m->layout.degree[CT_MESH_DP_SHARD], m->layout.degree[CT_MESH_CP], f->size);
    // ep neighbours of the fsdp group exchange tokens; every ep-th one holds the same experts.
    if (ct_comm_group_split(f, f->rank / ep, f->rank % ep, "ep", &m->ep)) return CT_ERR;
    return ct_comm_group_split(f, f->rank % ep, f->rank / ep, "expert_shard", &m->expert_shard);
}

void ct_mesh_set_timeout(ct_mesh *m, double timeout_s) {
    for (int d = 0; d < CT_MESH_NDIMS; d++) m->dim[d].timeout_s = timeout_s;
    m->fsdp.timeout_s = m->dp.timeout_s = m->dp_cp.timeout_s = timeout_s;
    m->ep.timeout_s = m->expert_shard.timeout_s = timeout_s;
}

void ct_mesh_free(ct_mesh *m) {
    for (int d = 0; d < CT_MESH_NDIMS; d++) ct_comm_group_free(&m->dim[d]);
    ct_comm_group_free(&m->fsdp);
    ct_comm_group_free(&m->dp);
    ct_comm_group_free(&m->dp_cp);
    ct_comm_group_free(&m->ep);
    ct_comm_group_free(&m->expert_shard);
}
