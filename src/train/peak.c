#include "train/peak.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_check.h"
#include "core/fs.h"
#include "plan/hardware.h"

enum { MEASURE_REPS = 5 };

static void calibration_file(char *out, size_t n) {
    const char *env = getenv("CTITAN_CALIBRATION"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env)
        snprintf(out, n, "%s", env);
    else if (xdg && *xdg)
        snprintf(out, n, "%s/ctitan/peaks.toml", xdg);
    else if (home && *home)
        snprintf(out, n, "%s/.cache/ctitan/peaks.toml", home);
    else
        out[0] = 0;
}

// "AMD EPYC 9R14 96-Core Processor" from /proc/cpuinfo, or "unknown-cpu".
static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown-cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ') v++;
        snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

// The calibration file is a cache: one that is not a regular file of at most 1 MiB (a few
// hundred lines) reads as empty, and the next store replaces it with a real one.
static FILE *open_cache(const char *file) {
    return file && *file ? ct_file_fopen_read(file, "calibration file", 1u << 20) : NULL;
}

double ct_peak_lookup(const char *file, const char *key) {
    FILE *f = open_cache(file);
    if (!f) return 0;
    char line[1024];
    double best = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '"' || strncmp(line + 1, key, kl) || line[1 + kl] != '"') continue;
        const char *eq = strchr(line + 2 + kl, '=');
        double v = eq ? strtod(eq + 1, NULL) : 0;
        if (v > best) best = v;
    }
    fclose(f);
    return best;
}

ct_status ct_peak_store(const char *file, const char *key, double gflops) {
    if (!file || !*file) return ct_set_error("no calibration file");
    if (ct_peak_lookup(file, key) >= gflops) return CT_OK;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        if (ct_fs_make_dirs(dir)) return CT_ERR;
    }
    ct_fs_atomic cache;  // ranks of one node may store at once: each through its own temporary file
    FILE *out = ct_fs_atomic_open(&cache, file, "matmul rate cache", CT_FS_TEMP_PER_PROCESS);
    if (!out) return CT_ERR;
    FILE *in = open_cache(file);
    char line[1024];
    size_t kl = strlen(key);
    if (!in)
        fprintf(out, "# ctitan: best matmul rate measured per (CPU, threads per rank, ranks per node, dtype, cpu "
                     "kernel set), GFLOP/s\n");
    while (in && fgets(line, sizeof line, in))
        if (!(line[0] == '"' && !strncmp(line + 1, key, kl) && line[1 + kl] == '"')) fputs(line, out);
    if (in) fclose(in);
    fprintf(out, "\"%s\" = %.3f\n", key, gflops);
    return ct_fs_atomic_commit(&cache);
}

ct_status ct_peak_init(ct_peak *p, const ct_config *cfg, const ct_kernels *k, bool compute_bf16, ct_group *world,
                  int ranks_on_node) {
    memset(p, 0, sizeof *p);
    const char *dtype = compute_bf16 ? "bf16" : "fp32";
    if (cfg->peak_tflops > 0) {
        p->flops = cfg->peak_tflops * 1e12;
        snprintf(p->how, sizeof p->how, "metrics.peak_tflops");
        return CT_OK;
    }
    if (cfg->device != CT_CFG_PEAK_CPU) {
        // A GPU's dense bf16 peak: the hardware profile the planner reads (profiles/*.toml, the
        // vendors' data sheets), the one place those numbers live.
        char device[16];
        ct_setting_choice("metrics.device", cfg->device, device, sizeof device);
        ct_hw_profile hw;
        if (ct_hw_profile_load(device, &hw))
            return ct_set_error_at(CT_E_CONFIG, "metrics.device", "metrics.device %s: %s (or give metrics.peak_tflops)",
                                   device, ct_last_error());
        p->flops = hw.peak_bf16;
        snprintf(p->how, sizeof p->how, "metrics.device %s, dense bf16 (profile %s)", device, hw.name);
        return CT_OK;
    }
    // Measured: every rank at once (they share the node's cores as training will), best of
    // MEASURE_REPS, the largest over ranks.
    double now = (compute_bf16 ? k->matmul_peak_gflops_bf16(2048, MEASURE_REPS) : k->matmul_peak_gflops(2048, MEASURE_REPS));
    ct_comm_all_reduce(world, &now, &now, 1, CT_F64, CT_COMM_MAX);
    char cpu[200];
    cpu_model(cpu, sizeof cpu);
    for (char *c = cpu; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.') *c = '_';
    const char *threads = getenv("OMP_NUM_THREADS");
    // (the kernel set too: a lower set's peak on the same CPU is its own, e.g. avx2 on an AVX-512 CPU)
    const char *kset = k->device == CT_DEVICE_CPU ? ct_kernel_set_name(ct_kernel_set_active()) : k->name;
    snprintf(p->key, sizeof p->key, "%s/threads %s/ranks per node %d/%s/%s", cpu,
             threads && *threads ? threads : "default", ranks_on_node, dtype, kset);
    calibration_file(p->file, sizeof p->file);
    double stored = ct_peak_lookup(p->file, p->key);
    ct_comm_broadcast(world, &stored, 1, CT_F64, 0);  // rank 0's file decides, as it writes it
    p->measured = true;
    p->flops = (now > stored ? now : stored) * 1e9;
    snprintf(p->how, sizeof p->how, "%s matmul, measured: %.1f now (best of %d), best on record %.1f%s%s", dtype, now,
             MEASURE_REPS, stored, p->file[0] ? " in " : "", p->file);
    if (now > stored) ct_peak_save(p, world->rank);
    return CT_OK;
}

double ct_peak_mfu(ct_peak *p, double flops) {
    if (p->flops <= 0) return 0;
    if (p->measured && flops > p->flops) {
        // Faster than the "peak": the measurement was disturbed (load). The step proves the rate.
        p->flops = flops;
        p->raised = true;
    }
    return flops / p->flops;
}

void ct_peak_save(const ct_peak *p, int rank) {
    if (rank != 0 || !p->measured || !p->file[0]) return;
    if (ct_peak_store(p->file, p->key, p->flops / 1e9))
        fprintf(stderr, "metrics: note: cannot keep the measured peak: %s\n", ct_last_error());
}
