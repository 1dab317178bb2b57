// `ctitan plot METRICS.jsonl [MORE.jsonl ...] --out FILE.svg [--x step|tokens] [--title T] [--logy]
//  [--smooth N] [--diff] [--png]`
// The loss curves of one or several runs from their metrics.jsonl (one JSON object per line, as
// metrics/metrics.c writes it), read by metrics/metrics_read.c and drawn by metrics/svg_plot.c.
// Each line gives a training-loss point (step, loss) and, where present, a validation-loss point
// (step, val_loss); a null (a non-finite number) is a gap, not an error. Input errors are one line naming the file (and the line), exit 1;
// usage errors exit 2.
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/toml.h"
#include "metrics/metrics_read.h"
#include "metrics/svg_plot.h"

static const char plot_about[] =
    "Draws the training loss of each run (solid) and its validation loss (dashed, same colour)\n"
    "from the metrics.jsonl files that `ctitan train` writes into its job.dump_folder; one colour\n"
    "per run, named in the legend by the run's folder (or the file's name when it is not\n"
    "metrics.jsonl). Null values (NaN / Inf losses) are left out.\n"
    "--x tokens: tokens seen = step x tokens per step (tokens_per_s x step_seconds, to a whole\n"
    "number of sequences of the run's config.toml where it has one).\n"
    "--png: converted by rsvg-convert or ImageMagick (magick / convert) found on PATH; without\n"
    "one, an error before anything is written.\n";

typedef struct {
    const char *path;
    char name[256];           // from the path (run_label)
    char label[256];          // the legend's: name, numbered when two runs share it
    int n, vn;
    double *x, *y, *vx, *vy;  // x holds the step until --x tokens scales it
    double tok_sum;           // sum over lines of tokens_per_s * step_seconds (tokens of one step)
    int tok_lines;
} run_data;

// Reads one metrics.jsonl into r. Returns 0, or 1 after printing one line naming file and line.
static int read_run(const char *path, run_data *r) {
    r->path = path;
    ct_metrics_losses l;
    if (ct_metrics_read_losses(path, &l)) {
        fprintf(stderr, "ctitan plot: %s\n", ct_last_error());
        return 1;
    }
    r->n = l.n, r->vn = l.vn, r->x = l.x, r->y = l.y, r->vx = l.vx, r->vy = l.vy;
    r->tok_sum = l.tok_sum, r->tok_lines = l.tok_lines;
    return 0;
}

// The legend's name: the run's folder for a metrics.jsonl (how runs are told apart: by their
// job.dump_folder), else the file's name without .jsonl.
static void run_label(const char *path, char *out, size_t size) {
    char full[PATH_MAX], copy[PATH_MAX];
    if (!realpath(path, full)) snprintf(full, sizeof full, "%s", path);
    snprintf(copy, sizeof copy, "%s", full);
    const char *base = basename(copy);
    if (!strcmp(base, "metrics.jsonl")) {
        snprintf(copy, sizeof copy, "%s", full);
        snprintf(out, size, "%s", basename(dirname(copy)));
        return;
    }
    size_t n = strlen(base);
    if (n > 6 && !strcmp(base + n - 6, ".jsonl")) n -= 6;
    snprintf(out, size, "%.*s", (int)n, base);
}

// --x tokens: every step consumes the same number of tokens (global batch x sequence length), and
// each line holds it as tokens_per_s x step_seconds, rounded in print to ~1e-4. The mean over lines
// is snapped to whole sequences when the run's config.toml (beside metrics.jsonl) gives
// training.seq_len. Summing the lines instead would count only the logged steps (log_freq).
static int tokens_axis(run_data *r) {
    if (!r->tok_lines) {
        fprintf(stderr, "ctitan plot: %s: no tokens_per_s and step_seconds to count tokens with (use --x step)\n",
                r->path);
        return 1;
    }
    double per_step = r->tok_sum / r->tok_lines;
    char dir[PATH_MAX], cfg[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s", r->path);
    snprintf(cfg, sizeof cfg, "%s/config.toml", dirname(dir));
    ct_toml_value *root = access(cfg, R_OK) == 0 ? ct_toml_parse_file(cfg) : NULL;
    const ct_toml_value *seq = root ? ct_toml_get_path(root, "training.seq_len") : NULL;
    if (seq && seq->type == CT_TOML_INT && seq->i > 0)
        per_step = fmax(1, round(per_step / (double)seq->i)) * (double)seq->i;
    else
        per_step = fmax(1, round(per_step));
    ct_toml_free(root);
    for (int i = 0; i < r->n; i++) r->x[i] *= per_step;
    for (int i = 0; i < r->vn; i++) r->vx[i] *= per_step;
    return 0;
}

// An executable named `name` on PATH, into out.
static int find_on_path(const char *name, char *out, size_t size) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, size, "%.*s/%s", (int)len, len ? path : ".", name);
        struct stat st;
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return 1;
        path += len + (path[len] == ':');
    }
    return 0;
}

// Runs argv (argv[0] a full path) and waits; its exit status, or -1 when it could not run.
static int run_program(char *const argv[]) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A path a converter cannot take for an option.
static void as_operand(const char *path, char *out, size_t size) {
    snprintf(out, size, "%s%s", path[0] == '-' ? "./" : "", path);
}

static int bad_usage(const char *what, const char *arg) {
    fprintf(stderr, "ctitan plot: %s%s%s (ctitan plot --help)\n", what, arg ? " " : "", arg ? arg : "");
    return 2;
}

int ct_cmd_plot(int argc, char **argv) {
    // The metrics files are the arguments that are not options, in order.
    const char **av = ct_xcalloc((size_t)argc + 1, sizeof *av);
    int first = 0, n_runs = 0;
    const char *out = NULL, *x_axis = "step";
    ct_plot_options po = {0};
    bool png = false, tokens = false;
    long smooth = 0;
    const ct_opt opts[] = {
        {"out", 'o', CT_OPT_STR, &out, "FILE.svg", "the picture (SVG, written whole or not at all)", 0, 0},
        {"x", 0, CT_OPT_STR, &x_axis, "step|tokens", "x axis: optimizer step (default), or tokens seen", 0, 0},
        {"title", 0, CT_OPT_STR, &po.title, "T", "the title (default \"Training loss\")", 0, 0},
        {"logy", 0, CT_OPT_FLAG, &po.logy, NULL, "log-scale loss axis", 0, 0},
        {"smooth", 0, CT_OPT_LONG, &smooth, "N", "also a centred N-point moving average (0 = off)", 0, 100000},
        {"diff", 0, CT_OPT_FLAG, &po.diff, NULL, "a lower panel: each run's loss minus the first run's", 0, 0},
        {"png", 0, CT_OPT_FLAG, &png, NULL, "also FILE.png (rsvg-convert or ImageMagick)", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan plot", "METRICS.jsonl [MORE.jsonl ...] --out FILE.svg [options]",
                              plot_about, opts, (int)(sizeof opts / sizeof opts[0]), av, &n_runs};
    int rc = ct_opt_parse(&spec, argc, argv);
    if (rc == CT_OPT_HELP) {
        free((void *)av);
        return 0;
    }
    po.smooth = (int)smooth;
    if (!rc && !strcmp(x_axis, "tokens")) tokens = true;
    else if (!rc && strcmp(x_axis, "step")) rc = bad_usage("--x: expected step or tokens, got", x_axis);
    if (!rc && !out) rc = bad_usage("needs --out FILE.svg", NULL);
    if (!rc && n_runs < 1) rc = bad_usage("needs at least one metrics.jsonl", NULL);
    char converter[PATH_MAX] = "", png_path[PATH_MAX] = "";
    const char *conv_name = NULL;
    if (!rc && png) {
        // Checked before anything is written, so that --png without a converter leaves nothing behind.
        static const char *const names[] = {"rsvg-convert", "magick", "convert"};
        for (int i = 0; i < 3 && !conv_name; i++)
            if (find_on_path(names[i], converter, sizeof converter)) conv_name = names[i];
        if (!conv_name) {
            fprintf(stderr, "ctitan plot: --png needs rsvg-convert or ImageMagick (magick / convert) on PATH, and none "
                            "is there; nothing written (without --png: the SVG alone)\n");
            rc = 1;
        }
        size_t n = out ? strlen(out) : 0;
        if (n >= 4 && !strcasecmp(out + n - 4, ".svg")) n -= 4;
        snprintf(png_path, sizeof png_path, "%.*s.png", (int)n, out ? out : "");
    }
    run_data *runs = rc ? NULL : ct_xcalloc((size_t)n_runs, sizeof *runs);
    ct_plot_run *pr = rc ? NULL : ct_xcalloc((size_t)n_runs, sizeof *pr);
    for (int i = 0; !rc && i < n_runs; i++) {
        rc = read_run(av[first + i], &runs[i]);
        if (!rc && tokens) rc = tokens_axis(&runs[i]);
        if (rc) break;
        run_label(av[first + i], runs[i].name, sizeof runs[i].name);
        int same = 1;  // two runs of one name (folders a/run and b/run) are told apart as "run #2"
        for (int k = 0; k < i; k++) same += !strcmp(runs[k].name, runs[i].name);
        if (same > 1) snprintf(runs[i].label, sizeof runs[i].label, "%.200s #%d", runs[i].name, same);
        else snprintf(runs[i].label, sizeof runs[i].label, "%s", runs[i].name);
        pr[i] = (ct_plot_run){.label = runs[i].label, .n = runs[i].n, .x = runs[i].x, .y = runs[i].y,
                              .vn = runs[i].vn, .vx = runs[i].vx, .vy = runs[i].vy};
    }
    if (!rc) {
        po.xlabel = tokens ? "tokens seen" : "step";
        ct_fs_atomic svg;
        FILE *f = ct_fs_atomic_open(&svg, out, "plot", 0);
        if (!f) {
            fprintf(stderr, "ctitan plot: %s\n", ct_last_error());
            rc = 1;
        } else if (ct_svg_plot_write(f, pr, n_runs, &po)) {
            fprintf(stderr, "ctitan plot: %s: %s\n", out, ct_last_error());
            ct_fs_atomic_abort(&svg);
            rc = 1;
        } else if (ct_fs_atomic_commit(&svg)) {
            fprintf(stderr, "ctitan plot: %s\n", ct_last_error());
            rc = 1;
        } else {
            printf("wrote %s (%d run%s)\n", out, n_runs, n_runs == 1 ? "" : "s");
        }
    }
    if (!rc && png) {
        char svg_arg[PATH_MAX + 2], png_arg[PATH_MAX + 2];
        as_operand(out, svg_arg, sizeof svg_arg);
        as_operand(png_path, png_arg, sizeof png_arg);
        char *rsvg[] = {converter, "-f", "png", "-o", png_arg, svg_arg, NULL};
        char *magick[] = {converter, "-background", "white", svg_arg, png_arg, NULL};
        int st = run_program(!strcmp(conv_name, "rsvg-convert") ? rsvg : magick);
        if (st != 0) {
            unlink(png_path);
            fprintf(stderr, "ctitan plot: %s could not make %s (exit %d); %s is written\n", converter, png_path, st, out);
            rc = 1;
        } else {
            printf("wrote %s (%s)\n", png_path, conv_name);
        }
    }
    for (int i = 0; runs && i < n_runs; i++) free(runs[i].x), free(runs[i].y), free(runs[i].vx), free(runs[i].vy);
    free(runs);
    free(pr);
    free((void *)av);
    return rc;
}
