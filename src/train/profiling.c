// Profiling a training run: when to record, where the files go, the SVG of every rank's spans
// (train/profiling.h).
#include "train/profiling.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/memory.h"
#include "core/trace.h"
#include "kernels/backend.h"
#include "metrics/metrics.h"
#include "train/timeline_svg.h"
#include "model/model.h"

// Spans one profiled iteration can record: a generous bound from the shape of the step. Per
// micro-batch and stage action, each block (the embedding and the head counted as blocks) records
// at most CT_PROFILE_BLOCK_SPANS spans over its passes (train/profiling.h), more with a ring of
// context-parallel exchanges; a validation pass half as many again per batch; plus a fixed
// allowance for the step-level ones.
static int span_capacity(const ct_config *c) {
    ct_model_config m;
    int layers = ct_model_config_from(&m, c) == CT_OK ? m.n_layers : 32;
    int pmb = c->pipeline_microbatch_size > 0 ? c->pipeline_microbatch_size : c->micro_batch_size;
    long n_mb = (long)c->gradient_accumulation_steps * (pmb > 0 ? (c->micro_batch_size + pmb - 1) / pmb : 1);
    long v = c->pipeline_stages_per_rank > 1 ? c->pipeline_stages_per_rank : 1;
    long cp = c->context_extension_degree > 1 ? c->context_extension_degree : 1;
    long per_pass = n_mb * v * (layers + 2L) * (CT_PROFILE_BLOCK_SPANS + CT_PROFILE_CP_SPANS * (cp - 1));
    long n = 8192 + per_pass + (c->val_enable ? (long)c->val_steps * per_pass / 2 : 0);
    return n > (1L << 22) ? 1 << 22 : (int)n;  // at most 4M spans (~300 MB)
}

void ct_profiler_init(ct_profiler *p, const ct_config *c, ct_group *world, const ct_mesh *mesh) {
    memset(p, 0, sizeof *p);
    p->world = world;
    p->mesh = mesh;
    p->traces = c->enable_profiling;
    p->snapshots = c->enable_memory_snapshot;
    p->freq = c->profile_freq > 0 ? c->profile_freq : 1;
    p->step_span = -1;
    snprintf(p->traces_dir, sizeof p->traces_dir, "%s/%s", c->dump_folder, c->save_traces_folder);
    snprintf(p->snapshot_dir, sizeof p->snapshot_dir, "%s/%s", c->dump_folder, c->save_memory_snapshot_folder);
    if (p->traces) ct_trace_reserve(span_capacity(c));
    if (p->snapshots) {
        // The folder exists before anything can fail to allocate: the failure path only opens a file.
        if (ct_fs_make_dirs(p->snapshot_dir)) {
            fprintf(stderr, "[rank %d] profiling: %s (no memory snapshots)\n", world->rank, ct_last_error());
            p->snapshots = false;
            return;
        }
        char path[sizeof p->snapshot_dir + 32];
        snprintf(path, sizeof path, "%s/rank%d_failed.txt", p->snapshot_dir, world->rank);
        ct_mem_snapshot_on_failure(path);
    }
}

void ct_profiler_use_device(ct_profiler *p, const ct_kernels *k) {
    if (p->traces) ct_trace_set_device_sync(k->device == CT_DEVICE_CPU ? NULL : k->synchronize);
}

void ct_profiler_free(ct_profiler *p) {
    if (p->snapshots) ct_mem_snapshot_on_failure(NULL);
    if (ct_trace_on()) ct_trace_stop();
}

void ct_profiler_step_begin(ct_profiler *p, int step) {
    int next = step + 1;
    if (!p->traces || next % p->freq != 0) return;
    // Every rank starts its clock together, so the files line up when read side by side.
    if (p->world->size > 1) ct_comm_barrier(p->world);
    ct_trace_start();
    p->recording = true;
    p->iteration = next;
    p->step_span = ct_trace_begin2(CT_TRACE_STEP, "step", "step", next, NULL, 0);
}

ct_status ct_profiler_write_trace(ct_profiler *p, char *path, size_t n) {
    const ct_mesh *mesh = p->mesh;
    int rank = p->world->rank;
    ct_trace_end(p->step_span);
    p->step_span = -1;
    ct_trace_stop();
    p->recording = false;
    char dir[sizeof p->traces_dir + 32];
    snprintf(dir, sizeof dir, "%s/iteration_%d", p->traces_dir, p->iteration);
    if (ct_fs_make_dirs(dir)) return CT_ERR;
    snprintf(path, n, "%s/rank%d_trace.json", dir, rank);
    char name[128];
    int len = snprintf(name, sizeof name, "rank %d:", rank);
    static const char *const dims[CT_MESH_NDIMS] = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
    for (int d = 0; d < CT_MESH_NDIMS && len < (int)sizeof name; d++)
        if (mesh->dim[d].size > 1)
            len += snprintf(name + len, sizeof name - (size_t)len, " %s %d/%d", dims[d], mesh->coord[d],
                            mesh->dim[d].size);
    return ct_trace_write_chrome(path, rank, name);
}

static void write_memory_snapshot(ct_profiler *p, int step) {
    ct_group *world = p->world;
    p->snapshot_written = true;
    char path[sizeof p->snapshot_dir + 32], why[96];
    snprintf(path, sizeof path, "%s/rank%d.txt", p->snapshot_dir, world->rank);
    snprintf(why, sizeof why, "rank %d of %d, end of step %d", world->rank, world->size, step);
    ct_status st = ct_comm_agree(world, ct_mem_snapshot_write(path, why));
    if (world->rank != 0) return;
    if (st) fprintf(stderr, "train: memory snapshot: %s\n", ct_last_error());
    else printf("memory snapshot after step %d written to %s/rank*.txt\n", step, p->snapshot_dir);
}

void ct_profiler_step_end(ct_profiler *p, int step) {
    ct_group *world = p->world;
    if (p->snapshots && !p->snapshot_written) write_memory_snapshot(p, step);
    if (!p->recording) return;
    char path[sizeof p->traces_dir + 64];
    long dropped = ct_trace_dropped();
    ct_status st = ct_comm_agree(world, ct_profiler_write_trace(p, path, sizeof path));
    if (world->rank != 0) return;
    if (st) {
        fprintf(stderr, "train: profiling: %s\n", ct_last_error());
        return;
    }
    // Every rank's file is complete (agreed): rank 0 draws them side by side.
    char dir[sizeof p->traces_dir + 32], svg[sizeof dir + 16], title[160], layout[96];
    snprintf(dir, sizeof dir, "%s/iteration_%d", p->traces_dir, p->iteration);
    snprintf(svg, sizeof svg, "%s/timeline.svg", dir);
    ct_mesh_layout_format(&p->mesh->layout, layout, sizeof layout);
    snprintf(title, sizeof title, "profile of step %d: %d ranks, %s", p->iteration, world->size, layout);
    int missing = 0;
    if (ct_profile_draw_timeline(dir, world->size, svg, title, &missing))
        fprintf(stderr, "train: profiling: %s\n", ct_last_error());
    printf("profile of step %d written to %s (rank*_trace.json: open in https://ui.perfetto.dev; timeline.svg)%s\n",
           p->iteration, dir, missing ? "; ranks without a readable trace here are left out of the SVG" : "");
    if (dropped)
        printf("profiling: rank 0 recorded %d spans and dropped %ld (the buffer was full)\n", ct_trace_count(), dropped);
}

// ------------------------------------------------------------------ the SVG of every rank

enum { MAX_LANES = 32, MAX_LEVELS = 6 };

static const char *fill_of(const char *cat) {
    static const struct {
        const char *cat, *fill;
    } fills[] = {{"step", "#bab0ac"}, {"action", "#4e79a7"}, {"compute", "#59a14f"}, {"fsdp", "#f28e2b"},
                 {"comm", "#e15759"}, {"optim", "#b07aa1"},  {"checkpoint", "#9c755f"},
                 {"kernel", "#8cd17d"}};
    for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++)
        if (cat && !strcmp(cat, fills[i].cat)) return fills[i].fill;
    return "#7f7f7f";
}

typedef struct {
    char tip[96];
} tip_text;

static const char *json_str(const ct_json *o, const char *key) {
    const ct_json *v = ct_json_get(o, key);
    return v && v->type == CT_JSON_STRING ? v->string : NULL;
}
static bool json_num(const ct_json *o, const char *key, double *out) {
    const ct_json *v = ct_json_get(o, key);
    if (!v || v->type != CT_JSON_NUMBER) return false;
    *out = v->number;
    return true;
}

// The complete events of the main thread (tid 0) of one trace: their count, and with bars set,
// the bars themselves, levelled by nesting (events come in the order they began).
static int main_thread_bars(const ct_json *events, int lane, ct_svg_bar *bars, tip_text *tips) {
    double open_end[MAX_LEVELS + 1];
    int depth = 0, n = 0;
    for (int i = 0; i < events->n; i++) {
        const ct_json *e = &events->items[i];
        const char *ph = json_str(e, "ph"), *name = json_str(e, "name");
        double ts, dur, tid;
        if (!ph || strcmp(ph, "X") || !name || !json_num(e, "ts", &ts) || !json_num(e, "dur", &dur) ||
            !json_num(e, "tid", &tid) || tid != 0)
            continue;
        if (bars) {
            while (depth > 0 && ts >= open_end[depth - 1]) depth--;
            int level = depth < MAX_LEVELS ? depth : MAX_LEVELS - 1;
            if (depth < MAX_LEVELS + 1) open_end[depth++] = ts + dur;
            const ct_json *args = ct_json_get(e, "args");
            double layer;
            if (args && json_num(args, "layer", &layer))
                snprintf(tips[n].tip, sizeof tips[n].tip, "%s (layer %d)", name, (int)layer);
            else
                snprintf(tips[n].tip, sizeof tips[n].tip, "%s", name);
            const char *cat = json_str(e, "cat");
            bars[n] = (ct_svg_bar){ts, ts + dur, lane, level, false, fill_of(cat), name, tips[n].tip};
        }
        n++;
    }
    return n;
}

ct_status ct_profile_draw_timeline(const char *dir, int n_ranks, const char *svg_path, const char *title,
                                   int *missing) {
    int lanes = n_ranks < MAX_LANES ? n_ranks : MAX_LANES;
    ct_json *docs[MAX_LANES] = {0};
    const ct_json *events[MAX_LANES] = {0};
    char names[MAX_LANES][16];
    const char *lane_names[MAX_LANES];
    *missing = 0;
    int total = 0;
    for (int r = 0; r < lanes; r++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/rank%d_trace.json", dir, r);
        snprintf(names[r], sizeof names[r], "rank %d", r);
        lane_names[r] = names[r];
        docs[r] = ct_json_read_file(path, "trace", (uint64_t)1 << 30);  // a long profiled window: hundreds of MiB
        const ct_json *ev = docs[r] ? ct_json_get(docs[r], "traceEvents") : NULL;
        if (!ev || ev->type != CT_JSON_ARRAY) {
            (*missing)++;
            continue;
        }
        events[r] = ev;
        total += main_thread_bars(ev, r, NULL, NULL);
    }
    ct_svg_bar *bars = ct_xcalloc((size_t)total + 1, sizeof *bars);
    tip_text *tips = ct_xcalloc((size_t)total + 1, sizeof *tips);
    int n = 0;
    for (int r = 0; r < lanes; r++)
        if (events[r]) n += main_thread_bars(events[r], r, bars + n, tips + n);
    static const ct_svg_legend legend[] = {
        {"#bab0ac", "step, data"}, {"#4e79a7", "executor action"}, {"#59a14f", "block / head"},
        {"#f28e2b", "FSDP gather, RS"}, {"#e15759", "wait on comm"}, {"#b07aa1", "grad norm, optim"},
        {"#9c755f", "checkpoint"}, {"#8cd17d", "kernel op"},
    };
    ct_svg_timeline tl = {
        .title = title,
        .n_lanes = lanes,
        .lane_names = lane_names,
        .levels = MAX_LEVELS,
        .level_height = 13,
        .bars = bars,
        .n_bars = n,
        .scale = 1e-3,  // the files' microseconds, drawn in ms
        .unit = "ms",
        .legend = legend,
        .n_legend = (int)(sizeof legend / sizeof legend[0]),
    };
    ct_status st = *missing == lanes ? ct_set_error("%s: no readable rank*_trace.json", dir)
                                     : ct_svg_timeline_write(svg_path, &tl);
    free(bars);
    free(tips);
    for (int r = 0; r < lanes; r++) ct_json_free(docs[r]);
    return st;
}
