// Hardware profiles: reading, writing and looking up the plain TOML files of profiles/
// (format in hardware.h). Every number is checked where it is read, so a profile that loads is
// one the time model can divide by.
#include "plan/hardware.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/toml.h"

// Where each key lands in ct_hw_profile, and how it is converted from the file's unit.
typedef enum { K_STRING, K_INT, K_NUM } key_type;
typedef enum { V_POSITIVE, V_NONNEG } key_range;
typedef struct {
    const char *key;
    key_type type;
    key_range range;
    double scale;      // file unit -> struct unit (GiB -> bytes, TFLOP/s -> FLOP/s, GB/s, us)
    size_t offset;     // of the double / int / char[64] field
    bool optional;
} key_spec;

#define OFF(f) offsetof(ct_hw_profile, f)
static const key_spec keys[] = {
    {"name", K_STRING, V_POSITIVE, 1, OFF(name), false},
    {"kind", K_STRING, V_POSITIVE, 1, 0, false},  // gpu | cpu -> hw->cpu (handled apart)
    {"memory_gib", K_NUM, V_POSITIVE, 1073741824.0, OFF(memory_bytes), false},
    {"memory_headroom_gib", K_NUM, V_NONNEG, 1073741824.0, OFF(memory_headroom), true},
    {"devices_per_node", K_INT, V_POSITIVE, 1, OFF(devices_per_node), false},
    {"peak_tflops_fp32", K_NUM, V_POSITIVE, 1e12, OFF(peak_fp32), false},
    {"peak_tflops_bf16", K_NUM, V_POSITIVE, 1e12, OFF(peak_bf16), false},
    {"peak_tflops_fp8", K_NUM, V_NONNEG, 1e12, OFF(peak_fp8), false},
    {"matmul_efficiency", K_NUM, V_POSITIVE, 1, OFF(matmul_efficiency), false},
    {"matmul_half_size", K_NUM, V_NONNEG, 1, OFF(matmul_half_size), false},
    {"attention_efficiency", K_NUM, V_POSITIVE, 1, OFF(attention_efficiency), false},
    {"attention_half_head_dim", K_NUM, V_NONNEG, 1, OFF(attention_half_head_dim), true},
    {"memory_bandwidth_gbs", K_NUM, V_POSITIVE, 1e9, OFF(memory_bandwidth), false},
    {"intra_node_bandwidth_gbs", K_NUM, V_POSITIVE, 1e9, OFF(intra_bw), false},
    {"intra_node_latency_us", K_NUM, V_NONNEG, 1e-6, OFF(intra_latency), false},
    {"inter_node_bandwidth_gbs", K_NUM, V_POSITIVE, 1e9, OFF(inter_bw), false},
    {"inter_node_latency_us", K_NUM, V_NONNEG, 1e-6, OFF(inter_latency), false},
    {"kernel_launch_us", K_NUM, V_NONNEG, 1e-6, OFF(kernel_launch), true},
    {"matmul_efficiency_fp8", K_NUM, V_NONNEG, 1, OFF(matmul_efficiency_fp8), true},
    {"sm_count", K_NUM, V_NONNEG, 1, OFF(sm_count), true},
    {"matmul_tile_m", K_NUM, V_NONNEG, 1, OFF(mm_tile_m), true},
    {"matmul_tile_n", K_NUM, V_NONNEG, 1, OFF(mm_tile_n), true},
    {"intra_node_busbw_gbs", K_NUM, V_NONNEG, 1e9, OFF(intra_busbw), true},
    {"intra_node_allreduce_busbw_gbs", K_NUM, V_NONNEG, 1e9, OFF(intra_ar_busbw), true},
    {"inter_node_busbw_gbs", K_NUM, V_NONNEG, 1e9, OFF(inter_busbw), true},
};
enum { N_KEYS = sizeof keys / sizeof keys[0] };

static const key_spec *find_key(const char *k) {
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].key, k)) return &keys[i];
    return NULL;
}

static ct_status set_key(ct_hw_profile *hw, const char *path, const key_spec *s, const ct_toml_value *v) {
    char *base = (char *)hw;
    if (s->type == K_STRING) {
        if (v->type != CT_TOML_STRING)
            return ct_set_error("%s:%d: %s must be a string (got %s)", path, v->line, s->key, ct_toml_type_name(v->type));
        if (!strcmp(s->key, "kind")) {
            if (strcmp(v->s, "gpu") && strcmp(v->s, "cpu"))
                return ct_set_error("%s:%d: kind must be \"gpu\" or \"cpu\" (got \"%s\")", path, v->line, v->s);
            hw->cpu = !strcmp(v->s, "cpu");
            return CT_OK;
        }
        if (!v->s[0] || strlen(v->s) >= sizeof hw->name)
            return ct_set_error("%s:%d: %s must be 1 to %zu characters", path, v->line, s->key, sizeof hw->name - 1);
        snprintf(base + s->offset, sizeof hw->name, "%s", v->s);
        return CT_OK;
    }
    double x;
    if (v->type == CT_TOML_INT)
        x = (double)v->i;
    else if (v->type == CT_TOML_FLOAT && s->type == K_NUM)
        x = v->f;
    else
        return ct_set_error("%s:%d: %s must be %s (got %s)", path, v->line, s->key,
                            s->type == K_INT ? "an integer" : "a number", ct_toml_type_name(v->type));
    if (!(x == x) || x > 1e30 || (s->range == V_POSITIVE ? !(x > 0) : !(x >= 0)))
        return ct_set_error("%s:%d: %s must be %s (got %g)", path, v->line, s->key,
                            s->range == V_POSITIVE ? "positive" : "zero or more", x);
    // The time model divides by these: a positive number as small as 1e-320 (subnormal) passes
    // the test above and turns every time into inf. No real rate, efficiency or latency is that
    // close to 0 in the profile's units, so anything under 1e-9 is taken for a typo.
    if (x != 0 && x < 1e-9)
        return ct_set_error("%s:%d: %s must be 0 or at least 1e-9 (got %g: too small to divide by)", path, v->line,
                            s->key, x);
    if (s->type == K_INT) {
        if (x > INT_MAX) return ct_set_error("%s:%d: %s is too large (%g)", path, v->line, s->key, x);
        *(int *)(base + s->offset) = (int)x;
    } else {
        *(double *)(base + s->offset) = x * s->scale;
    }
    return CT_OK;
}

static ct_status load_file(const char *path, ct_hw_profile *hw) {
    ct_toml_value *root = ct_toml_parse_file(path);
    if (!root) return CT_ERR;  // ct_toml's message names the file
    memset(hw, 0, sizeof *hw);
    bool seen[N_KEYS] = {false};
    ct_status st = CT_OK;
    for (int i = 0; i < root->n && st == CT_OK; i++) {
        const key_spec *s = find_key(root->keys[i]);
        if (!s) {
            st = ct_set_error("%s:%d: unknown key '%s' (a profile has: name, kind, memory_gib, memory_headroom_gib, devices_per_node, "
                              "peak_tflops_*, matmul_*, sm_count, attention_*, *_bandwidth_gbs, *_busbw_gbs, "
                              "*_latency_us, kernel_launch_us)", path, root->items[i]->line, root->keys[i]);
            break;
        }
        seen[s - keys] = true;
        st = set_key(hw, path, s, root->items[i]);
    }
    for (int i = 0; i < N_KEYS && st == CT_OK; i++)
        if (!seen[i] && !keys[i].optional) st = ct_set_error("%s: missing key '%s'", path, keys[i].key);
    const key_spec *headroom = find_key("memory_headroom_gib");
    if (st == CT_OK && !seen[headroom - keys]) {
        double gib = 1073741824.0, dflt = 0.05 * hw->memory_bytes;
        hw->memory_headroom = hw->cpu ? 0 : dflt > 2 * gib ? dflt : 2 * gib;
        if (hw->memory_headroom >= hw->memory_bytes) hw->memory_headroom = 0;  // a tiny test device
    }
    if (st == CT_OK && hw->memory_headroom >= hw->memory_bytes)
        st = ct_set_error("%s: memory_headroom_gib (%g) must be less than memory_gib (%g)", path,
                          hw->memory_headroom / 1073741824.0, hw->memory_bytes / 1073741824.0);
    if (st == CT_OK && hw->matmul_efficiency > 1)
        st = ct_set_error("%s: matmul_efficiency must be at most 1 (got %g)", path, hw->matmul_efficiency);
    if (st == CT_OK && hw->matmul_efficiency_fp8 > 1)
        st = ct_set_error("%s: matmul_efficiency_fp8 must be at most 1 (got %g)", path, hw->matmul_efficiency_fp8);
    // A busbw above the line rate is NVLink SHARP's all-reduce only (the switch reduces, so less
    // crosses each link than a ring's count); the ring figures are bounded by the wire.
    if (st == CT_OK && hw->intra_busbw > hw->intra_bw)
        st = ct_set_error("%s: intra_node_busbw_gbs (%g) must be at most intra_node_bandwidth_gbs (%g)", path,
                          hw->intra_busbw / 1e9, hw->intra_bw / 1e9);
    if (st == CT_OK && hw->inter_busbw > hw->inter_bw)
        st = ct_set_error("%s: inter_node_busbw_gbs (%g) must be at most inter_node_bandwidth_gbs (%g)", path,
                          hw->inter_busbw / 1e9, hw->inter_bw / 1e9);
    if (st == CT_OK && hw->sm_count > 0 && hw->sm_count != floor(hw->sm_count))
        st = ct_set_error("%s: sm_count must be a whole number (got %g)", path, hw->sm_count);
    if (st == CT_OK && hw->attention_efficiency > 1)
        st = ct_set_error("%s: attention_efficiency must be at most 1 (got %g)", path, hw->attention_efficiency);
    ct_toml_free(root);
    if (st != CT_OK) return CT_ERR;
    // id: the file's stem
    const char *slash = strrchr(path, '/'), *stem = slash ? slash + 1 : path;
    size_t n = strcspn(stem, ".");
    if (n >= sizeof hw->id) n = sizeof hw->id - 1;
    memcpy(hw->id, stem, n);
    hw->id[n] = 0;
    return CT_OK;
}

static bool readable(const char *p) { return access(p, R_OK) == 0; }

// The folders a profile id is looked up in, in order; returns how many were filled.
static int profile_dirs(char dirs[][PATH_MAX]) {
    int n = 0;
    const char *env = getenv("CTITAN_PROFILES");
    if (env && env[0]) snprintf(dirs[n++], PATH_MAX, "%s", env);
    snprintf(dirs[n++], PATH_MAX, "profiles");  // run from the source tree (tests, scripts)
    // Beside the binary's source tree: build/ctitan -> ../profiles, build/tests/x -> ../../profiles.
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *s = strrchr(exe, '/');
        if (s) {
            *s = 0;
            snprintf(dirs[n++], PATH_MAX, "%.*s/../profiles", PATH_MAX - 16, exe);
            snprintf(dirs[n++], PATH_MAX, "%.*s/../../profiles", PATH_MAX - 16, exe);
        }
    }
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0])
        snprintf(dirs[n++], PATH_MAX, "%.*s/ctitan/profiles", PATH_MAX - 32, xdg);
    else if (home && home[0])
        snprintf(dirs[n++], PATH_MAX, "%.*s/.config/ctitan/profiles", PATH_MAX - 32, home);
    return n;
}

// Short names users type for the shipped profiles.
static const char *canonical_id(const char *name) {
    static const char *alias[][2] = {{"h100", "h100_sxm"}, {"a100", "a100_80gb"}, {"cpu", "this_machine"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(name, alias[i][0])) return alias[i][1];
    return name;
}

ct_status ct_hw_profile_load(const char *name_or_path, ct_hw_profile *hw) {
    if (!name_or_path || !name_or_path[0]) return ct_set_error("hardware profile: no name given");
    size_t len = strlen(name_or_path);
    if (strchr(name_or_path, '/') || (len > 5 && !strcmp(name_or_path + len - 5, ".toml"))) {
        if (!readable(name_or_path))
            return ct_set_error_at(CT_E_IO, name_or_path, "%s: cannot read the hardware profile", name_or_path);
        return load_file(name_or_path, hw);
    }
    const char *id = canonical_id(name_or_path);
    char dirs[8][PATH_MAX], path[PATH_MAX + 80];
    int n = profile_dirs(dirs);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%.*s/%.63s.toml", PATH_MAX - 1, dirs[i], id);
        if (readable(path)) return load_file(path, hw);
    }
    return ct_set_error("%s.toml: no such hardware profile in $CTITAN_PROFILES, profiles/, beside the binary or in "
                        "~/.config/ctitan/profiles (shipped: h100_sxm, h100_hbm2e_500w, h200, a100_80gb, b200, this_machine)", id);
}

ct_status ct_hw_profile_write(const char *path, const ct_hw_profile *hw) {
    FILE *f = ct_file_fopen_write(path, "hardware profile", CT_FILE_WRITE_TRUNC);
    if (!f) return CT_ERR;
    fprintf(f, "# Hardware profile for ctitan plan (format: src/plan/hardware.h).\n");
    fprintf(f, "name = \"%s\"\n", hw->name);
    fprintf(f, "kind = \"%s\"\n", hw->cpu ? "cpu" : "gpu");
    // %.17g: every number reads back as the double it was (a measured efficiency of 3e-5 must
    // not come back as 0, nor 0.6180339887 as 0.6180).
    fprintf(f, "memory_gib = %.17g\n", hw->memory_bytes / 1073741824.0);
    fprintf(f, "memory_headroom_gib = %.17g\n", hw->memory_headroom / 1073741824.0);
    fprintf(f, "devices_per_node = %d\n", hw->devices_per_node);
    fprintf(f, "peak_tflops_fp32 = %.17g\n", hw->peak_fp32 / 1e12);
    fprintf(f, "peak_tflops_bf16 = %.17g\n", hw->peak_bf16 / 1e12);
    fprintf(f, "peak_tflops_fp8 = %.17g\n", hw->peak_fp8 / 1e12);
    fprintf(f, "matmul_efficiency = %.17g\n", hw->matmul_efficiency);
    fprintf(f, "matmul_half_size = %.17g\n", hw->matmul_half_size);
    fprintf(f, "attention_efficiency = %.17g\n", hw->attention_efficiency);
    fprintf(f, "attention_half_head_dim = %.17g\n", hw->attention_half_head_dim);
    fprintf(f, "memory_bandwidth_gbs = %.17g\n", hw->memory_bandwidth / 1e9);
    fprintf(f, "intra_node_bandwidth_gbs = %.17g\n", hw->intra_bw / 1e9);
    fprintf(f, "intra_node_latency_us = %.17g\n", hw->intra_latency / 1e-6);
    fprintf(f, "inter_node_bandwidth_gbs = %.17g\n", hw->inter_bw / 1e9);
    fprintf(f, "inter_node_latency_us = %.17g\n", hw->inter_latency / 1e-6);
    fprintf(f, "kernel_launch_us = %.17g\n", hw->kernel_launch / 1e-6);
    fprintf(f, "matmul_efficiency_fp8 = %.17g\n", hw->matmul_efficiency_fp8);
    fprintf(f, "sm_count = %.17g\n", hw->sm_count);
    fprintf(f, "matmul_tile_m = %.17g\n", hw->mm_tile_m);
    fprintf(f, "matmul_tile_n = %.17g\n", hw->mm_tile_n);
    fprintf(f, "intra_node_busbw_gbs = %.17g\n", hw->intra_busbw / 1e9);
    fprintf(f, "intra_node_allreduce_busbw_gbs = %.17g\n", hw->intra_ar_busbw / 1e9);
    fprintf(f, "inter_node_busbw_gbs = %.17g\n", hw->inter_busbw / 1e9);
    if (fclose(f)) return ct_set_error("%s: write failed", path);
    return CT_OK;
}

double ct_hw_attention_efficiency(const ct_hw_profile *hw, double head_dim) {
    double h = hw->attention_half_head_dim;
    return h > 0 ? hw->attention_efficiency * head_dim / (head_dim + h) : hw->attention_efficiency;
}

double ct_hw_peak(const ct_hw_profile *hw, const char *dtype) {
    if (!strcmp(dtype, "fp8")) return hw->peak_fp8 > 0 ? hw->peak_fp8 : hw->peak_bf16;
    if (!strcmp(dtype, "bf16")) return hw->peak_bf16;
    return hw->peak_fp32;
}

double ct_hw_busbw(const ct_hw_profile *hw, bool inter_node, ct_hw_coll coll) {
    if (hw->cpu || !inter_node) {
        double ring = hw->intra_busbw > 0 ? hw->intra_busbw : hw->intra_bw;
        return coll == CT_HW_ALL_REDUCE && hw->intra_ar_busbw > 0 ? hw->intra_ar_busbw : ring;
    }
    return hw->inter_busbw > 0 ? hw->inter_busbw : hw->inter_bw;
}

double ct_hw_coll_bus_bytes(ct_hw_coll coll, int n, double bytes) {
    if (n < 2) return 0;
    if (coll == CT_HW_SEND_RECV) return bytes;
    double ring = (n - 1.0) / n * bytes;
    return coll == CT_HW_ALL_REDUCE ? 2 * ring : ring;
}

double ct_hw_coll_seconds(const ct_hw_profile *hw, ct_hw_coll coll, int n, double bytes, bool inter_node) {
    if (n < 2 || !(bytes > 0)) return 0;
    bool inter = inter_node && !hw->cpu;
    double steps = coll == CT_HW_SEND_RECV ? 1 : coll == CT_HW_ALL_REDUCE ? 2.0 * (n - 1) : n - 1.0;
    double lat = inter ? hw->inter_latency : hw->intra_latency;
    return steps * lat + ct_hw_coll_bus_bytes(coll, n, bytes) / ct_hw_busbw(hw, inter, coll);
}

// `groups` outputs of (M x N), one kernel, cut into (tm x tn) tiles that run in waves of `sms`,
// one tile per SM: the fraction of the waves' tile area that holds output. Edge tiles cover past
// each output (tile quantisation) and the last wave runs part-full (wave quantisation); both cost
// a full tile's and a full wave's time. A grouped kernel's tiles, of every group, share the waves.
static double wave_fill(double groups, double M, double N, double tm, double tn, double sms) {
    double tiles = groups * ceil(M / tm) * ceil(N / tn), waves = ceil(tiles / sms);
    return groups * M * N / (waves * sms * tm * tn);
}

double ct_hw_grouped_matmul_waves(const ct_hw_profile *hw, double groups, double M, double N) {
    if (!(hw->sm_count > 0) || !(M >= 1) || !(N >= 1) || !(groups >= 1)) return 1;
    double tm = hw->mm_tile_m > 0 ? hw->mm_tile_m : 128, tn = hw->mm_tile_n > 0 ? hw->mm_tile_n : 256;
    return fmax(wave_fill(groups, M, N, tm, tn, hw->sm_count), wave_fill(groups, M, N, tn, tm, hw->sm_count));
}

double ct_hw_matmul_waves(const ct_hw_profile *hw, double M, double N) { return ct_hw_grouped_matmul_waves(hw, 1, M, N); }

// The efficiency before quantisation: the dtype's measured figure, on a size curve where the
// profile has one.
static double plateau(const ct_hw_profile *hw, double M, double N, double K, bool fp8) {
    double eff = fp8 && hw->matmul_efficiency_fp8 > 0 ? hw->matmul_efficiency_fp8 : hw->matmul_efficiency;
    if (hw->matmul_half_size > 0) {
        double s = fmin(M, fmin(N, K));
        eff *= s / (s + hw->matmul_half_size);
    }
    return eff;
}

double ct_hw_matmul_efficiency(const ct_hw_profile *hw, double M, double N, double K, bool fp8) {
    return plateau(hw, M, N, K, fp8) * ct_hw_matmul_waves(hw, M, N);
}

double ct_hw_grouped_matmul_seconds(const ct_hw_profile *hw, double groups, double M, double N, double K, double peak,
                                    bool fp8, double in_width, double out_width, double mem_bw) {
    double eff = plateau(hw, M, N, K, fp8) * ct_hw_grouped_matmul_waves(hw, groups, M, N);
    double compute = groups * 2.0 * M * N * K / (peak * eff);
    if (!(hw->sm_count > 0) || !(mem_bw > 0)) return compute;
    double traffic = groups * ((M * K + K * N) * in_width + M * N * out_width) / mem_bw;
    return fmax(compute, traffic);
}

double ct_hw_matmul_seconds(const ct_hw_profile *hw, double M, double N, double K, double peak, bool fp8,
                            double in_width, double out_width, double mem_bw) {
    return ct_hw_grouped_matmul_seconds(hw, 1, M, N, K, peak, fp8, in_width, out_width, mem_bw);
}
