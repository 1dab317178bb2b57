// `ctitan plan`: which layout for a model on a cluster (plan/plan.h), before any device-hour.
//   ctitan plan --model 70b --gpus 256 --gpu h100 --seq_len 8192 --global_batch_tokens 16M
//   ctitan plan ... --layout fsdp32,tp8 --local_batch 16 --ac full --float8 --compile
//   ctitan plan --tables
//   ctitan plan --calibrate [--out profiles/this_machine.toml]   (mpirun -np 2 for link figures)
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/file_check.h"
#include "core/version.h"
#include "model/checkpointing.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline_schedules.h"
#include "plan/explain.h"
#include "plan/plan.h"

static const double GIB = 1024.0 * 1024.0 * 1024.0;

typedef struct {
    const char *model, *config, *gpu, *layout, *ac, *schedule, *emit, *batch_text, *out, *precision, *dataset, *stack;
    const char *async_tp, *fsdp_prefetch;
    long gpus, seq_len, local_batch, micro_batch, top, steps, stages_per_rank;
    double memory_gib, headroom_gib;
    bool explain, tables, calibrate, float8, mxfp8, compile, no_compile, no_async, no_float8, all, f8_gather;
} plan_args;

static const char plan_about[] =
    "Searches the layouts (pp x dp_replicate x dp_shard x cp x tp, pipeline schedule, micro-batches,\n"
    "activation checkpointing, precision) of a Llama 3 model on a cluster and ranks those that fit the\n"
    "device's memory by predicted tokens/s per device. With --layout, evaluates that one layout instead.\n"
    "  --model: debugmodel | 8b | 10b | 70b | 405b (10b: the 10B quick experiment's dimensions), the\n"
    "           mixture-of-experts qwen3_30b_a3b | deepseek_v3_like (searched with expert parallelism too), or\n"
    "           --config FILE takes the model and training.seq_len from a ctitan TOML file.\n"
    "  --gpu: a profile in profiles/ (h100_sxm | h100, h100_hbm2e_500w, h200, a100_80gb | a100, b200,\n"
    "         this_machine) or a .toml path; this_machine is a cpu profile, written by --calibrate;\n"
    "         h100_hbm2e_500w is the H100 variant TorchTitan's published runs used (docs/planner.md).\n"
    "  --global_batch_tokens: tokens per optimizer step over the job; K and M are 1024 and 1048576\n"
    "         (16M = 2048 sequences of 8192). Default: one sequence per device.\n"
    "  --layout: degrees by name, outermost first by convention: pp8,dp2,fsdp4,cp2,tp4 (dp = replicate,\n"
    "         fsdp = shard; ep<N>: experts over N of the fsdp x cp ranks, not counted in the product). --local_batch: sequences per data-parallel rank per step (default 1);\n"
    "         --micro_batch: sequences per micro-batch (default: the local batch, or 1 with a pipeline).\n"
    "Memory per device is what ctitan allocates for the run (by category); times come from the\n"
    "profile's peaks and links and the pipeline schedule simulator. See docs/parallelism.md, \"Choosing a layout\".\n";

// The model's dimensions: a flavor, or the 10B quick experiment's (configs/llama3_10b_quick_experiment.toml).
static ct_status set_model(ct_config *c, const char *name) {
    static const char *const flavors[][2] = {{"debugmodel", "debugmodel"}, {"8b", "8B"}, {"70b", "70B"}, {"405b", "405B"}};
    for (size_t i = 0; i < sizeof flavors / sizeof flavors[0]; i++)
        if (!strcasecmp(name, flavors[i][0])) {
            snprintf(c->flavor, sizeof c->flavor, "%s", flavors[i][1]);
            return CT_OK;
        }
    // Mixture-of-experts shapes (model/llama3_moe/config.c): Qwen3-30B-A3B's and DeepSeek-V3's
    // without multi-head latent attention.
    static const char *const moe[] = {"qwen3_30b_a3b", "deepseek_v3_like"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if (!strcasecmp(name, moe[i])) {
            snprintf(c->model_name, sizeof c->model_name, "llama3_moe");
            snprintf(c->flavor, sizeof c->flavor, "%s", moe[i]);
            return CT_OK;
        }
    if (!strcasecmp(name, "10b")) {
        snprintf(c->flavor, sizeof c->flavor, "8B");
        c->dim = 5120, c->n_layers = 32, c->n_heads = 40, c->n_kv_heads = 8;
        c->multiple_of = 1024, c->ffn_dim_multiplier = 1.0;
        return CT_OK;
    }
    return ct_set_error("--model: unknown model '%s' (debugmodel, 8b, 10b, 70b, 405b, qwen3_30b_a3b, deepseek_v3_like; "
                        "or --config FILE)",
                        name);
}

// "16M", "1048576", "512K" -> tokens.
static ct_status parse_tokens(const char *text, long *out) {
    char *end;
    double v = strtod(text, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1024, end++;
    else if (*end == 'M' || *end == 'm') mult = 1048576, end++;
    else if (*end == 'G' || *end == 'g') mult = 1073741824, end++;
    if (end == text || *end || !(v > 0) || v * mult > 1e15)
        return ct_set_error("--global_batch_tokens: expected a token count such as 16M or 1048576, got '%s'", text);
    *out = (long)(v * mult + 0.5);
    return CT_OK;
}

// "79.6 GiB each, 4.0 of it kept free for the runtime (memory_headroom_gib), 75.6 for the run"
static void memory_text(const ct_plan_request *r, char *out, size_t n) {
    double budget = ct_plan_budget(&r->hw, r->devices);
    if (r->hw.memory_headroom > 0)
        snprintf(out, n, "%.1f GiB %s, %.1f of it kept free for the runtime (memory_headroom_gib), %.1f for the run",
                 (r->hw.cpu ? r->hw.memory_bytes / (r->devices > 0 ? r->devices : 1) : r->hw.memory_bytes) / GIB,
                 r->hw.cpu ? "per rank" : "each", r->hw.memory_headroom / GIB / (r->hw.cpu ? r->devices : 1),
                 budget / GIB);
    else
        snprintf(out, n, "%.1f GiB %s", budget / GIB, r->hw.cpu ? "per rank" : "each");
}

static void print_header(const ct_plan_request *r, FILE *f) {
    long seqs = r->global_batch_tokens / r->base.seq_len;
    char mem[160];
    memory_text(r, mem, sizeof mem);
    const ct_model_config *m = &r->model;
    if (m->n_experts > 0) {
        fprintf(f, "%s %s (%.2fB parameters, %.2fB active per token: dim %d, %d layers, %d/%d heads of %d, %d experts "
                   "of ffn %d, %d per token, %d shared, %d dense first layers of ffn %d, vocab %d) on %d x %s (%s), "
                   "sequence %d, global batch %ld tokens (%ld sequences)\n",
                m->family->name, m->flavor, ct_model_num_params(m) / 1e9, ct_model_active_params(m) / 1e9, m->dim,
                m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, m->n_experts, m->ffn_hidden, m->moe_top_k,
                m->n_shared_experts, m->n_dense_layers, m->dense_ffn_hidden, m->vocab_size, r->devices, r->hw.name,
                mem, r->base.seq_len, r->global_batch_tokens, seqs);
        fprintf(f, "(MFU and model FLOPs on the active parameters: %.3g FLOPs per token; expert-parallel layouts end in "
                   "ep<N>, ranks borrowed from fsdp x cp)\n",
                ct_model_flops_per_token(m, r->base.seq_len));
        ct_model_config trained;
        if (ct_model_config_from(&trained, &r->base))
            fprintf(f, "(planned only: ctitan train refuses it today: %s)\n", ct_last_error());
    } else {
        fprintf(f, "Llama 3 %s (%.2fB parameters: dim %d, %d layers, %d/%d heads, ffn %d, vocab %d) on %d x %s (%s), "
                   "sequence %d, global batch %ld tokens (%ld sequences)\n",
                m->flavor, ct_model_num_params(m) / 1e9, m->dim, m->n_layers, m->n_heads, m->n_kv_heads, m->ffn_hidden,
                m->vocab_size, r->devices, r->hw.name, mem, r->base.seq_len, r->global_batch_tokens, seqs);
    }
    fprintf(f, "(MFU: model FLOPs per second over the device's dense peak at the matmul precision: bf16, or fp8 "
               "for float8 layouts)\n");
    if (r->comm.fsdp_prefetch != r->comm.async_tp)
        fprintf(f, "(overlap set apart: FSDP prefetch %s, async tp %s; ctitan train has one switch for both)\n",
                r->comm.fsdp_prefetch ? "on" : "off", r->comm.async_tp ? "on" : "off");
    if (r->comm.float8_all_gather)
        fprintf(f, "(float8 layouts gather their matmul weights in fp8, as TorchTitan's float8 all-gather; the memory "
                   "is ctitan's, which gathers in the compute dtype)\n");
}

static void print_row_header(FILE *f) {
    fprintf(f, "%3s  %-22s %-58s %7s  %-27s %8s %8s %8s %8s %10s %6s\n", "#", "layout", "options", "GiB",
            "params/grads/optim/act/comm", "step s", "compute", "exposed", "bubble", "tok/s/dev", "MFU");
}

static void print_row(FILE *f, int i, const ct_plan_candidate *c) {
    char opts[160], parts[64];
    ct_plan_options_name(&c->cfg, &c->comm, opts, sizeof opts);
    const double *b = c->mem.bytes;
    snprintf(parts, sizeof parts, "%.1f/%.1f/%.1f/%.1f/%.1f", b[CT_MEM_PARAMS] / GIB, b[CT_MEM_GRADS] / GIB,
             b[CT_MEM_OPTIM] / GIB, b[CT_MEM_ACTIVATIONS] / GIB, b[CT_MEM_COMM] / GIB);
    fprintf(f, "%3d  %-22s %-58s %7.1f  %-27s", i, c->layout, opts, c->mem.total / GIB, parts);
    if (!c->fits) {
        fprintf(f, "  does not fit\n");
        return;
    }
    double exposed = 0;
    for (int d = 0; d < CT_PLAN_NDIMS; d++) exposed += c->time.exposed[d];
    fprintf(f, " %8.3f %8.3f %8.3f %8.3f %10.0f %5.1f%%\n", c->time.step, c->time.compute, exposed, c->time.bubble,
            c->time.tokens_per_s_per_device, 100 * c->time.mfu);
}

// What the checkpointing policy keeps per token and block on one rank, against keeping everything,
// and the matmul FLOPs its recompute adds (model/checkpointing.h).
static void print_checkpointing(FILE *f, const ct_plan_request *r, const ct_config *c) {
    int tp = c->compute_parallel_degree > 1 ? c->compute_parallel_degree : 1;
    ct_model_config local;
    if (ct_model_config_local(&r->model, tp, &local)) return;
    ct_ac_policy p = ct_parallelize_ac_policy(c);
    ct_ac_shape s = {.cfg = &local, .compute_bytes = c->mixed_precision == CT_CFG_BF16 ? 2 : 4,
                     .seq_parallel_tp = c->sequence_parallel && tp > 1 ? tp : 1};
    long T = c->seq_len / (c->context_extension_degree > 1 ? c->context_extension_degree : 1);
    // every-N-th block: the mean over the N-block period
    int n = p.kind == CT_AC_FULL && p.every > 1 ? p.every : 1;
    double kept = 0, flops = 0;
    for (int l = 0; l < n; l++) {
        ct_ac_kind k = ct_ac_layer_kind(&p, l);
        kept += ct_ac_kept_bytes_per_token(&s, k) / n;
        flops += ct_ac_recompute_flops_per_token(&s, k, T) / n;
    }
    double model = ct_model_flops_per_token(&local, c->seq_len) / local.n_layers;  // per token and block
    fprintf(f, "activations kept per token and block: %.1f KB (ac %s; %.1f KB keeping everything); ", kept / 1e3,
            p.kind == CT_AC_FULL && p.every > 1 ? "every-N full" : ct_ac_kind_name(p.kind),
            ct_ac_kept_bytes_per_token(&s, CT_AC_NONE) / 1e3);
    if (p.kind == CT_AC_NONE) fprintf(f, "nothing recomputed\n");
    else if (flops == 0) fprintf(f, "recomputes elementwise work only (no matmul)\n");
    else fprintf(f, "recompute %.1f MFLOP per token and block (%.1f%% of the model FLOPs)\n", flops / 1e6, 100 * flops / model);
}

// One candidate in full (--layout).
static void print_detail(FILE *f, const ct_plan_candidate *c) {
    char opts[160];
    ct_plan_options_name(&c->cfg, &c->comm, opts, sizeof opts);
    fprintf(f, "layout %s (%s)\n", c->layout, opts);
    ct_model_config m, local;
    if (ct_model_config_from(&m, &c->cfg) || ct_model_config_local(&m, c->cfg.compute_parallel_degree, &local))
        fprintf(f, "(planned only: ctitan train refuses this layout today: %s)\n", ct_last_error());
    fprintf(f, "memory per device: %.2f GiB of the %.2f the run may fill%s (pipeline rank %d)\n", c->mem.total / GIB,
            c->budget / GIB, c->fits ? "" : ": DOES NOT FIT", c->mem.worst_pp_rank);
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++)
        fprintf(f, "  %-12s %9.2f GiB\n", ct_mem_category_name((ct_mem_category)k), c->mem.bytes[k] / GIB);
    const ct_plan_time *t = &c->time;
    fprintf(f, "step: %.4f s = compute %.4f + exposed communication %.4f + pipeline bubble %.4f\n", t->step, t->compute,
            t->step - t->compute - t->bubble, t->bubble);
    fprintf(f, "  compute: attention %.4f s, blocks' elementwise passes %.4f s, matmuls and the rest %.4f s\n",
            t->attention, t->elementwise, t->compute - t->attention - t->elementwise);
    for (int d = 0; d < CT_PLAN_NDIMS; d++)
        if (t->comm[d] > 0)
            fprintf(f, "  %-12s communication %.4f s, exposed %.4f s\n", ct_plan_dim_name((ct_plan_dim)d), t->comm[d],
                    t->exposed[d]);
    fprintf(f, "throughput: %.0f tokens/s per device, %.1f TFLOP/s per device, MFU %.1f%%\n",
            t->tokens_per_s_per_device, t->model_flops_per_s / 1e12, 100 * t->mfu);
}

static ct_status emit(const char *path, const ct_plan_candidate *c, const ct_plan_request *r) {
    if (ct_plan_trainer_runs(c)) return CT_ERR;
    FILE *f = ct_file_fopen_write(path, "--emit-config file", CT_FILE_WRITE_TRUNC);
    if (!f) return CT_ERR;
    fprintf(f, "# ctitan plan (ctitan %s): layout %s on %d x %s; predicted %.0f tokens/s per device, MFU %.1f%%, "
               "%.1f MiB per device.\n# Run with: mpirun -np %d ctitan train --config %s\n",
            ct_version(), c->layout, r->devices, r->hw.name, c->time.tokens_per_s_per_device, 100 * c->time.mfu,
            c->mem.total / (1024.0 * 1024.0), r->devices, path);
    ct_config_write_toml(&c->cfg, f);
    if (fclose(f)) return ct_set_error("--emit-config %s: write failed", path);
    return CT_OK;
}

// --async_tp / --fsdp_prefetch: on (the default) or off; --no_async_comm turns both off.
static ct_status overlap_switch(const char *text, const char *name, bool no_async, bool *out) {
    *out = !no_async;
    if (!text) return CT_OK;
    if (strcmp(text, "on") && strcmp(text, "off")) return ct_set_error("%s: expected on or off, got '%s'", name, text);
    if (no_async && !strcmp(text, "on"))
        return ct_set_error("%s on contradicts --no_async_comm (which turns every overlap off): drop one", name);
    *out = !strcmp(text, "on");
    return CT_OK;
}

static ct_status build_request(const plan_args *a, ct_plan_request *r) {
    memset(r, 0, sizeof *r);
    ct_config *b = &r->base;
    ct_config_defaults(b);
    if (a->config && ct_config_load_file(b, a->config)) return CT_ERR;
    if (a->model && set_model(b, a->model)) return CT_ERR;
    if (a->seq_len) b->seq_len = (int)a->seq_len;
    if (a->steps) b->steps = (int)a->steps;
    if (a->dataset) snprintf(b->dataset, sizeof b->dataset, "%s", a->dataset);
    if (ct_hw_profile_load(a->gpu ? a->gpu : "h100_sxm", &r->hw)) return CT_ERR;
    if (a->memory_gib > 0) r->hw.memory_bytes = a->memory_gib * GIB;
    if (a->headroom_gib >= 0) r->hw.memory_headroom = a->headroom_gib * GIB;
    if (r->hw.memory_headroom >= r->hw.memory_bytes)
        return ct_set_error("--memory_headroom_gib %.1f leaves nothing of the %.1f GiB per device: give less",
                            r->hw.memory_headroom / GIB, r->hw.memory_bytes / GIB);
    // The sequence length sets the attention's cost and the activations: no default stands in
    // for it (the configuration default, 256, is a smoke-test length, not a Llama 3 run's).
    if (!a->seq_len && !a->config)
        return ct_set_error("--seq_len: how many tokens per sequence? (Llama 3 pretrained at 8192; or --config FILE "
                            "with training.seq_len)");
    // Precision: bf16 mixed precision on a GPU; the configuration's own on a cpu profile.
    if (a->precision) {
        if (strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16"))
            return ct_set_error("--precision: expected fp32 or bf16, got '%s'", a->precision);
        b->mixed_precision = strcmp(a->precision, "bf16") ? CT_CFG_FP32 : CT_CFG_BF16;
    } else if (!r->hw.cpu) {
        b->mixed_precision = CT_CFG_BF16;
    }
    if (ct_config_validate(b)) return CT_ERR;
    if (ct_model_config_plan(&r->model, b)) return CT_ERR;
    // The 10B experiment is the 8B flavor with its own dimensions: say which model it is.
    if (a->model && !strcasecmp(a->model, "10b")) snprintf(r->model.flavor, sizeof r->model.flavor, "10B");
    r->devices = (int)a->gpus;
    r->global_batch_tokens = (long)r->devices * b->seq_len;
    if (a->batch_text && parse_tokens(a->batch_text, &r->global_batch_tokens)) return CT_ERR;
    r->allow_float8 = !a->no_float8 && !r->hw.cpu;
    r->compile = !a->no_compile;
    if (overlap_switch(a->async_tp, "--async_tp", a->no_async, &r->comm.async_tp) ||
        overlap_switch(a->fsdp_prefetch, "--fsdp_prefetch", a->no_async, &r->comm.fsdp_prefetch))
        return CT_ERR;
    r->comm.float8_all_gather = a->f8_gather;
    if (a->f8_gather && (a->no_float8 || (a->layout && !a->float8)))
        return ct_set_error("--float8_all_gather gathers float8 matmuls' weights in fp8: %s",
                            a->layout ? "add --float8" : "drop --no_float8");
    if (a->stack && ct_plan_stack_parse(a->stack, &r->stack)) return CT_ERR;
    return CT_OK;
}

// --layout: one configuration, evaluated.
static int evaluate_layout(const plan_args *a, ct_plan_request *r) {
    ct_config c = r->base;
    if (ct_plan_layout_parse(a->layout, r->devices, &c)) goto fail;
    ct_plan_single_cp_balance(&c);
    int dp = c.data_replicate_degree * c.data_shard_degree;
    long local = a->local_batch ? a->local_batch : 1;
    if (a->batch_text) {
        long seqs = r->global_batch_tokens / c.seq_len;
        if (seqs % dp) {
            ct_set_error("--global_batch_tokens: %ld sequences do not split over %d data-parallel ranks", seqs, dp);
            goto fail;
        }
        local = seqs / dp;
    }
    long micro = a->micro_batch ? a->micro_batch : c.pipeline_degree > 1 ? 1 : local;
    if (local % micro) {
        ct_set_error("--micro_batch %ld does not divide the local batch of %ld sequences", micro, local);
        goto fail;
    }
    c.micro_batch_size = (int)micro, c.gradient_accumulation_steps = (int)(local / micro);
    r->global_batch_tokens = local * dp * c.seq_len;
    if (c.pipeline_degree > 1) {
        snprintf(c.pipeline_schedule, sizeof c.pipeline_schedule, "%s", a->schedule ? a->schedule : "1f1b");
        c.pipeline_stages_per_rank = a->stages_per_rank ? (int)a->stages_per_rank
                                   : strstr(c.pipeline_schedule, "interleaved") || !strcmp(c.pipeline_schedule, "zbv")
                                       ? 2 : 1;
        // The schedule must run with these stages per rank and micro-batches, or the label and
        // the time model would describe different pipelines (ZBV is always 2 per rank).
        ct_pp_kind kind;
        if (ct_pp_kind_parse(c.pipeline_schedule, &kind) ||
            ct_pp_validate(kind, c.pipeline_degree, c.pipeline_stages_per_rank, c.gradient_accumulation_steps)) {
            ct_set_error("--schedule %s --stages_per_rank %d: %s", c.pipeline_schedule, c.pipeline_stages_per_rank,
                         ct_last_error());
            goto fail;
        }
    }
    const char *ac = a->ac ? a->ac : "none";
    if (!strcmp(ac, "op") || !strcmp(ac, "selective"))
        c.ac_mode = CT_CFG_AC_SELECTIVE, snprintf(c.ac_option, sizeof c.ac_option, "op");
    else if (!strcmp(ac, "elementwise"))
        c.ac_mode = CT_CFG_AC_SELECTIVE, snprintf(c.ac_option, sizeof c.ac_option, "elementwise");
    else if (!strcmp(ac, "full")) c.ac_mode = CT_CFG_AC_FULL;
    else if (!strcmp(ac, "none")) c.ac_mode = CT_CFG_AC_NONE;
    else if (atoi(ac) >= 1) c.ac_mode = CT_CFG_AC_SELECTIVE, snprintf(c.ac_option, sizeof c.ac_option, "%d", atoi(ac));
    else {
        ct_set_error("--ac: expected none, op, elementwise, full or a block count N (every N-th block), got '%s'", ac);
        goto fail;
    }
    // A GPU without fp8 tensor cores (peak_tflops_fp8 = 0) cannot run 8-bit matmuls: refused,
    // not predicted at the bf16 rate under a float8 label. (A cpu profile runs ctitan's own
    // 8-bit matmuls, which emulate the numerics at the bf16/fp32 rate.)
    if ((a->float8 || a->mxfp8) && !r->hw.cpu && !(r->hw.peak_fp8 > 0)) {
        ct_set_error("--%s: the %s has no fp8 matmul units (peak_tflops_fp8 = 0 in its profile '%s'); drop --%s",
                     a->mxfp8 ? "mxfp8" : "float8", r->hw.name, r->hw.id, a->mxfp8 ? "mxfp8" : "float8");
        goto fail;
    }
    c.float8 = a->float8, c.mxfp8 = a->mxfp8;
    c.compile = a->compile, c.enable_async_comm = r->comm.fsdp_prefetch;
    if (ct_config_validate(&c)) goto fail;
    ct_plan_candidate cand;
    if (ct_plan_evaluate(r, &c, &cand)) goto fail;
    print_header(r, stdout);
    print_detail(stdout, &cand);
    print_checkpointing(stdout, r, &cand.cfg);
    if (a->emit && emit(a->emit, &cand, r)) goto fail;
    if (a->emit) printf("wrote %s\n", a->emit);
    return cand.fits ? 0 : 1;
fail:
    fprintf(stderr, "ctitan plan: %s\n", ct_last_error());
    return 2;
}

static int search_and_print(const plan_args *a, ct_plan_request *r, int top, FILE *f) {
    ct_plan_candidate *all;
    int n;
    if (ct_plan_search(r, &all, &n)) {
        fprintf(stderr, "ctitan plan: %s\n", ct_last_error());
        return 1;
    }
    print_header(r, f);
    int fit = 0;
    while (fit < n && all[fit].fits) fit++;
    fprintf(f, "%d layouts considered, %d fit; ranked by predicted tokens/s per device:\n", n, fit);
    if (!fit) {
        char why[768];
        ct_plan_refusal(r, all, n, why, sizeof why);
        fprintf(stderr, "ctitan plan: nothing fits: %s\n", why);
        free(all);
        return 1;
    }
    print_row_header(f);
    int shown = a->all ? fit : (top < fit ? top : fit);
    for (int i = 0; i < shown; i++) print_row(f, i + 1, &all[i]);
    if (a->explain) {
        fprintf(f, "\n");
        ct_plan_explain(r, all, n, f);
    }
    int rc = 0;
    if (a->emit) {
        if (emit(a->emit, &all[0], r)) {
            fprintf(stderr, "ctitan plan: %s\n", ct_last_error());
            rc = 1;
        } else {
            fprintf(f, "wrote %s (layout %s)\n", a->emit, all[0].layout);
        }
    }
    free(all);
    return rc;
}

// The three reference tables: a 10B model on 8 devices, 70B on 32, 405B on 256 (H100 SXM unless
// --gpu says otherwise). Batches: 1M tokens of 4096-token sequences (10B, as its shipped config),
// 4M and 16M tokens of 8192 (Llama 3's own 405B run used 4M-16M).
static int tables(const plan_args *a) {
    static const struct {
        const char *model;
        int gpus, seq;
        const char *batch;
    } rows[] = {{"10b", 8, 4096, "1M"}, {"70b", 32, 8192, "4M"}, {"405b", 256, 8192, "16M"}};
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        plan_args t = *a;
        t.model = rows[i].model, t.gpus = rows[i].gpus, t.seq_len = rows[i].seq, t.batch_text = rows[i].batch;
        t.config = NULL, t.emit = NULL, t.explain = false;
        ct_plan_request r;
        if (build_request(&t, &r)) {
            fprintf(stderr, "ctitan plan: %s\n", ct_last_error());
            return 1;
        }
        printf("%sTable %zu. ", i ? "\n" : "", i + 1);
        rc |= search_and_print(&t, &r, a->top ? (int)a->top : 5, stdout);
    }
    return rc;
}

int ct_cmd_plan(int argc, char **argv) {
    plan_args a = {0};
    a.headroom_gib = -1;  // the profile's
    const ct_opt opts[] = {
        {"model", 0, CT_OPT_STR, &a.model, "NAME", "debugmodel | 8b | 10b | 70b | 405b | qwen3_30b_a3b | deepseek_v3_like", 0, 0},
        {"config", 0, CT_OPT_STR, &a.config, "FILE", "take the model (and training settings) from a ctitan TOML", 0, 0},
        {"gpus", 0, CT_OPT_LONG, &a.gpus, "N", "devices (ranks) in the job", 1, 1 << 20},
        {"gpu", 0, CT_OPT_STR, &a.gpu, "PROFILE", "hardware profile (default h100_sxm)", 0, 0},
        {"stack", 0, CT_OPT_STR, &a.stack, "S", "software stack the times are for: ctitan (default) | torchtitan", 0, 0},
        {"seq_len", 0, CT_OPT_LONG, &a.seq_len, "T", "tokens per sequence (default: the config's)", 1, 1 << 24},
        {"global_batch_tokens", 0, CT_OPT_STR, &a.batch_text, "N", "tokens per step over the job (16M, 1048576)", 0, 0},
        {"layout", 0, CT_OPT_STR, &a.layout, "L", "evaluate this layout (fsdp32,tp8) instead of searching", 0, 0},
        {"local_batch", 0, CT_OPT_LONG, &a.local_batch, "N", "--layout: sequences per data-parallel rank per step", 1, 1 << 20},
        {"micro_batch", 0, CT_OPT_LONG, &a.micro_batch, "N", "--layout: sequences per micro-batch", 1, 1 << 20},
        {"schedule", 0, CT_OPT_STR, &a.schedule, "NAME", "--layout: pipeline schedule (default 1f1b)", 0, 0},
        {"stages_per_rank", 0, CT_OPT_LONG, &a.stages_per_rank, "V", "--layout: virtual pipeline stages per rank", 1, 64},
        {"ac", 0, CT_OPT_STR, &a.ac, "MODE", "--layout: none | op | elementwise | full | N (every N-th block)", 0, 0},
        {"float8", 0, CT_OPT_FLAG, &a.float8, NULL, "--layout: float8 matmuls", 0, 0},
        {"mxfp8", 0, CT_OPT_FLAG, &a.mxfp8, NULL, "--layout: MXFP8 matmuls", 0, 0},
        {"compile", 0, CT_OPT_FLAG, &a.compile, NULL, "--layout: fused kernels", 0, 0},
        {"no_compile", 0, CT_OPT_FLAG, &a.no_compile, NULL, "search without fused kernels", 0, 0},
        {"no_float8", 0, CT_OPT_FLAG, &a.no_float8, NULL, "search bf16 only", 0, 0},
        {"no_async_comm", 0, CT_OPT_FLAG, &a.no_async, NULL, "communication not overlapped (--async_tp and --fsdp_prefetch off)", 0, 0},
        {"async_tp", 0, CT_OPT_STR, &a.async_tp, "on|off", "tp's collectives behind their matmuls (default on)", 0, 0},
        {"fsdp_prefetch", 0, CT_OPT_STR, &a.fsdp_prefetch, "on|off",
         "FSDP's gathers and reduce-scatters behind the neighbouring blocks (default on)", 0, 0},
        {"float8_all_gather", 0, CT_OPT_FLAG, &a.f8_gather, NULL,
         "float8 layouts gather their matmul weights in fp8 (TorchTitan's; ctitan train gathers in bf16)", 0, 0},
        {"precision", 0, CT_OPT_STR, &a.precision, "P", "fp32 | bf16 (default: bf16 on a GPU, the config's on a CPU)", 0, 0},
        {"memory_gib", 0, CT_OPT_DOUBLE, &a.memory_gib, "GIB", "override the profile's memory per device", 0.001, 1e6},
        {"memory_headroom_gib", 0, CT_OPT_DOUBLE, &a.headroom_gib, "GIB",
         "memory kept free of the run's buffers: CUDA context, NCCL, allocator (default: the profile's)", 0, 1e6},
        {"top", 0, CT_OPT_LONG, &a.top, "N", "rows to print (default 10)", 1, 100000},
        {"all", 0, CT_OPT_FLAG, &a.all, NULL, "print every layout that fits", 0, 0},
        {"explain", 0, CT_OPT_FLAG, &a.explain, NULL, "walk the decision for the best layout", 0, 0},
        {"emit_config", 0, CT_OPT_STR, &a.emit, "FILE", "write the best (or the evaluated) layout as a ctitan TOML", 0, 0},
        {"steps", 0, CT_OPT_LONG, &a.steps, "N", "training.steps in the emitted config", 1, 1L << 30},
        {"dataset", 0, CT_OPT_STR, &a.dataset, "D", "training.dataset in the emitted config", 0, 0},
        {"tables", 0, CT_OPT_FLAG, &a.tables, NULL, "the reference tables: 10B on 8, 70B on 32, 405B on 256 devices", 0, 0},
        {"calibrate", 0, CT_OPT_FLAG, &a.calibrate, NULL, "measure this machine into a profile", 0, 0},
        {"out", 0, CT_OPT_STR, &a.out, "FILE", "--calibrate: where (default profiles/this_machine.toml)", 0, 0},
    };
    ct_opt_spec spec = {"ctitan plan", "--model NAME --gpus N [--gpu PROFILE] [options]", plan_about, opts,
                        (int)(sizeof opts / sizeof opts[0]), NULL, NULL};
    int st = ct_opt_parse(&spec, argc, argv);
    if (st == CT_OPT_HELP) return 0;
    if (st == CT_OPT_ERROR) return 2;
    if (a.calibrate) {
        if (ct_hw_calibrate(a.out)) {
            fprintf(stderr, "ctitan plan --calibrate: %s\n", ct_last_error());
            return 1;
        }
        return 0;
    }
    if (a.tables) return tables(&a);
    if (!a.model && !a.config) {
        fprintf(stderr, "ctitan plan: which model? --model debugmodel|8b|10b|70b|405b or --config FILE (--help)\n");
        return 2;
    }
    if (!a.gpus) {
        fprintf(stderr, "ctitan plan: how many devices? --gpus N (--help)\n");
        return 2;
    }
    ct_plan_request r;
    if (build_request(&a, &r)) {
        fprintf(stderr, "ctitan plan: %s\n", ct_last_error());
        return 2;
    }
    if (a.layout) {
        if (a.explain) {
            fprintf(stderr, "ctitan plan: --explain walks a search's decision between layouts; with --layout there is "
                            "none to walk: drop --explain (the evaluation prints its breakdown) or drop --layout\n");
            return 2;
        }
        return evaluate_layout(&a, &r);
    }
    return search_and_print(&a, &r, a.top ? (int)a.top : 10, stdout);
}
