// --explain and the refusal: the planner's decision told in the order a person would take it,
// each step quoting the searched candidates' predictions.
#include "plan/explain.h"

#include <stdlib.h>
#include <string.h>

static const double GIB = 1024.0 * 1024.0 * 1024.0;

// A filter over candidates; arg points to what it compares with.
typedef bool (*cand_filter)(const ct_plan_candidate *c, const void *arg);

// The candidate with the least memory among those the filter takes (NULL: none).
static const ct_plan_candidate *smallest(const ct_plan_candidate *all, int n, cand_filter keep, const void *arg) {
    const ct_plan_candidate *best = NULL;
    for (int i = 0; i < n; i++)
        if (keep(&all[i], arg) && (!best || all[i].mem.total < best->mem.total)) best = &all[i];
    return best;
}

// The fastest fitting candidate the filter takes (NULL: none fits).
static const ct_plan_candidate *fastest(const ct_plan_candidate *all, int n, cand_filter keep, const void *arg) {
    const ct_plan_candidate *best = NULL;
    for (int i = 0; i < n; i++)
        if (all[i].fits && keep(&all[i], arg) &&
            (!best || all[i].time.tokens_per_s_per_device > best->time.tokens_per_s_per_device))
            best = &all[i];
    return best;
}

static bool sharding_only(const ct_plan_candidate *c, const void *arg) {
    return c->cfg.compute_parallel_degree == 1 && c->cfg.context_extension_degree == 1 && c->cfg.pipeline_degree == 1;
}
static bool tp_only(const ct_plan_candidate *c, const void *tp) {
    return c->cfg.compute_parallel_degree == *(const int *)tp && c->cfg.context_extension_degree == 1 &&
           c->cfg.pipeline_degree == 1;
}
static bool tp_pp(const ct_plan_candidate *c, const void *pp) {
    return c->cfg.pipeline_degree == *(const int *)pp && c->cfg.context_extension_degree == 1;
}
static bool with_cp(const ct_plan_candidate *c, const void *cp) { return c->cfg.context_extension_degree == *(const int *)cp; }

// Step 5 compares candidates that differ from the best only in checkpointing or precision.
typedef struct {
    const ct_plan_candidate *best;
    int value;  // the checkpointing index (ac_index) or float8 (0 / 1)
} vary;
static bool same_degrees(const ct_config *a, const ct_config *b) {
    return a->compute_parallel_degree == b->compute_parallel_degree &&
           a->context_extension_degree == b->context_extension_degree && a->pipeline_degree == b->pipeline_degree &&
           a->data_replicate_degree == b->data_replicate_degree && a->micro_batch_size == b->micro_batch_size &&
           !strcmp(a->pipeline_schedule, b->pipeline_schedule) &&
           a->pipeline_stages_per_rank == b->pipeline_stages_per_rank;
}
// 0 none, 1 TorchTitan's per op, 2 elementwise, 3 full (every block or every N-th)
static int ac_index(const ct_config *c) {
    ct_cfg_ac ac = ct_config_ac(c);
    return ac.kind == CT_CFG_KEEP_ALL ? 0 : ac.kind == CT_CFG_KEEP_OPS ? 1 : ac.kind == CT_CFG_KEEP_ELEMENTWISE ? 2 : 3;
}
static bool same_but_ac(const ct_plan_candidate *c, const void *arg) {
    const vary *v = arg;
    return same_degrees(&c->cfg, &v->best->cfg) && ac_index(&c->cfg) == v->value && c->cfg.float8 == v->best->cfg.float8;
}
static bool same_but_precision(const ct_plan_candidate *c, const void *arg) {
    const vary *v = arg;
    return same_degrees(&c->cfg, &v->best->cfg) && ac_index(&c->cfg) == ac_index(&v->best->cfg) &&
           c->cfg.float8 == (v->value != 0);
}

static void say_memory(FILE *f, const ct_plan_candidate *c) {
    const ct_plan_memory *m = &c->mem;
    fprintf(f, "%.1f GiB (parameters %.1f, gradients %.1f, optimizer %.1f, activations %.1f, communication %.1f, "
               "other %.1f)",
            m->total / GIB, m->bytes[CT_MEM_PARAMS] / GIB, m->bytes[CT_MEM_GRADS] / GIB, m->bytes[CT_MEM_OPTIM] / GIB,
            m->bytes[CT_MEM_ACTIVATIONS] / GIB, m->bytes[CT_MEM_COMM] / GIB, m->bytes[CT_MEM_OTHER] / GIB);
}

static void say_candidate(FILE *f, const ct_plan_candidate *c) {
    char opts[160];
    ct_plan_options_name(&c->cfg, &c->comm, opts, sizeof opts);
    fprintf(f, "%s (%s): ", c->layout, opts);
    say_memory(f, c);
    if (c->fits) fprintf(f, ", %.0f tokens/s per device, MFU %.1f%%", c->time.tokens_per_s_per_device, 100 * c->time.mfu);
    else fprintf(f, ": does not fit in %.1f GiB", c->budget / GIB);
    fprintf(f, "\n");
}

void ct_plan_explain(const ct_plan_request *r, const ct_plan_candidate *all, int n, FILE *f) {
    double budget = ct_plan_budget(&r->hw, r->devices);
    int node = r->hw.cpu ? r->devices : r->hw.devices_per_node;
    fprintf(f, "How the plan was chosen (%d devices, %.1f GiB each, %d per node):\n", r->devices, budget / GIB, node);

    fprintf(f, "1. Data sharding alone (FSDP over every device), the smallest such layout:\n   ");
    const ct_plan_candidate *s = smallest(all, n, sharding_only, NULL);
    if (s) say_candidate(f, s);
    else fprintf(f, "no such layout can be built (the batch does not split over %d data-parallel ranks)\n", r->devices);
    bool fits = s && s->fits;
    if (fits) fprintf(f, "   It fits: tensor, pipeline and context parallel are needed only where they are faster.\n");

    fprintf(f, "2. Tensor parallel within a node (it splits parameters and activations; its collectives want the "
               "node's links):\n");
    int tp_fit = 0;
    for (int tp = 2; tp <= node; tp *= 2) {
        const ct_plan_candidate *c = smallest(all, n, tp_only, &tp);
        if (!c) continue;
        fprintf(f, "   tp %d: ", tp);
        say_candidate(f, c);
        if (c->fits && !tp_fit) tp_fit = tp;
    }
    if (!fits) {
        if (tp_fit) fprintf(f, "   The first that fits: tp %d.\n", tp_fit);
        else fprintf(f, "   None fits with tensor parallel inside one node alone.\n");
    }
    fits = fits || tp_fit;

    fprintf(f, "3. Pipeline across nodes (each stage holds a share of the layers; costs a bubble):\n");
    int pp_fit = 0;
    for (int pp = 2; pp <= r->model.n_layers && pp <= r->devices; pp *= 2) {
        const ct_plan_candidate *c = smallest(all, n, tp_pp, &pp);
        if (!c) continue;
        fprintf(f, "   pp %d: ", pp);
        say_candidate(f, c);
        if (c->fits && !pp_fit) pp_fit = pp;
    }
    if (!fits) fprintf(f, pp_fit ? "   The first that fits: pp %d.\n" : "   None fits with a pipeline either.\n", pp_fit);
    fits = fits || pp_fit;

    fprintf(f, "4. Context parallel (one sequence's activations split over ranks):\n");
    bool any_cp = false;
    for (int cp = 2; cp <= 64; cp *= 2) {
        const ct_plan_candidate *c = smallest(all, n, with_cp, &cp);
        if (!c) continue;
        any_cp = true;
        fprintf(f, "   cp %d: ", cp);
        say_candidate(f, c);
    }
    if (!any_cp) fprintf(f, "   no context-parallel layout applies (sequence %d)\n", r->base.seq_len);

    const ct_plan_candidate *best = n && all[0].fits ? &all[0] : NULL;
    if (!best) {
        char why[512];
        ct_plan_refusal(r, all, n, why, sizeof why);
        fprintf(f, "Nothing fits: %s\n", why);
        return;
    }
    fprintf(f, "5. Checkpointing and precision, for the best degrees (%s):\n", best->layout);
    static const char *const acs[] = {"none", "per op", "elementwise", "full"};
    for (int a = 0; a < 4; a++) {
        vary v = {best, a};
        const ct_plan_candidate *c = fastest(all, n, same_but_ac, &v);
        const ct_plan_candidate *m = c ? c : smallest(all, n, same_but_ac, &v);
        if (!m) continue;
        fprintf(f, "   ac %-17s ", acs[a]);
        say_candidate(f, m);
    }
    if (r->allow_float8 && r->hw.peak_fp8 > 0) {
        for (int p = 0; p < 2; p++) {
            vary v = {best, p};
            const ct_plan_candidate *c = fastest(all, n, same_but_precision, &v);
            if (!c) continue;
            fprintf(f, "   %-20s ", p ? "float8 matmuls:" : "bf16 matmuls:");
            say_candidate(f, c);
        }
    } else {
        fprintf(f, "   precision: %s (%s)\n",
                best->cfg.float8 ? "float8" : ct_cfg_precision_name(best->cfg.mixed_precision),
                r->hw.peak_fp8 > 0 ? "float8 not allowed by the request" : "the device has no fp8 matmul");
    }
    const ct_plan_time *t = &best->time;
    fprintf(f, "Chosen: %s: step %.3f s = compute %.3f + exposed communication", best->layout, t->step, t->compute);
    for (int d = 0; d < CT_PLAN_NDIMS; d++)
        if (t->comm[d] > 0) fprintf(f, " %s %.3f (of %.3f)", ct_plan_dim_name((ct_plan_dim)d), t->exposed[d], t->comm[d]);
    int fit = 0;
    for (int i = 0; i < n; i++) fit += all[i].fits;
    fprintf(f, " + bubble %.3f; the fastest of the %d candidates that fit.\n", t->bubble, fit);
}

void ct_plan_refusal(const ct_plan_request *r, const ct_plan_candidate *all, int n, char *buf, size_t len) {
    const ct_plan_candidate *s = NULL;
    for (int i = 0; i < n; i++)
        if (!s || all[i].mem.total < s->mem.total) s = &all[i];
    if (!s) {
        snprintf(buf, len, "no layout of %d devices can be built for this model and batch", r->devices);
        return;
    }
    double budget = ct_plan_budget(&r->hw, r->devices);
    // More devices: the same search with 2x, 4x, ... the devices and the same global batch.
    int more = 0;
    for (int mult = 2; mult <= 64 && !more; mult *= 2) {
        ct_plan_request bigger = *r;
        bigger.devices = r->devices * mult;
        ct_plan_candidate *v;
        int k;
        if (ct_plan_search(&bigger, &v, &k)) continue;
        if (k && v[0].fits) more = bigger.devices;
        free(v);
    }
    char more_text[128] = "";
    if (more) snprintf(more_text, sizeof more_text, "; it fits on %d devices", more);
    else snprintf(more_text, sizeof more_text, "; not even on %d devices with this batch", r->devices * 64);
    snprintf(buf, len,
             "the smallest layout, %s, needs %.1f GiB per device (parameters %.1f, gradients %.1f, optimizer %.1f, "
             "activations %.1f, communication %.1f), %.1f GiB more than the %.1f GiB a device has%s, or on devices "
             "with %.0f GiB",
             s->layout, s->mem.total / GIB, s->mem.bytes[CT_MEM_PARAMS] / GIB, s->mem.bytes[CT_MEM_GRADS] / GIB,
             s->mem.bytes[CT_MEM_OPTIM] / GIB, s->mem.bytes[CT_MEM_ACTIVATIONS] / GIB, s->mem.bytes[CT_MEM_COMM] / GIB,
             (s->mem.total - budget) / GIB, budget / GIB, more_text, s->mem.total / GIB + 0.5);
}
