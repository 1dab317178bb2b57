#include "metrics/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/fs.h"

// A resumed run keeps the lines of steps up to the checkpoint's and drops later ones (written by
// the run that died after its last save), so each step appears once.
static ct_status keep_steps_up_to(const char *path, int last_step) {
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return CT_OK;  // nothing logged yet
    // Streamed a line at a time, so no size limit; a FIFO here would block the resume.
    FILE *in = ct_file_fopen_read(path, "metrics log", 0);
    if (!in) return CT_ERR;
    ct_fs_atomic rewrite;
    FILE *out = ct_fs_atomic_open(&rewrite, path, "metrics log", 0);
    if (!out) {
        fclose(in);
        return CT_ERR;
    }
    char line[4096];
    while (fgets(line, sizeof line, in)) {
        int step;
        if (sscanf(line, "{\"step\": %d,", &step) == 1 && step > last_step) continue;
        fputs(line, out);
    }
    fclose(in);
    return ct_fs_atomic_commit(&rewrite);
}

// A previous run's metrics in the same folder are kept under the time they were last written.
// Only a regular file is moved: anything else under the name (a folder, a FIFO, a link) stays
// where it is, for the writer to refuse by name.
static ct_status set_aside(const char *folder, const char *path) {
    struct stat sb;
    if (lstat(path, &sb) || !S_ISREG(sb.st_mode) || sb.st_size == 0) return CT_OK;
    struct tm tm;
    localtime_r(&sb.st_mtime, &tm);
    char stamp[32], old[1200];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(old, sizeof old, "%s/metrics-%s.jsonl", folder, stamp);
    return ct_fs_rename(path, old);
}

bool ct_metrics_user_terminal(void) {
    const char *tty = getenv("CTITAN_TTY");
    if (tty && *tty) return atoi(tty) != 0;
    // Under a launcher, standard output is the launcher's pseudo-terminal or pipe, forwarded to
    // wherever the user sent mpirun's output: a file often.
    const char *launchers[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++)
        if (getenv(launchers[i])) return false;
    return isatty(STDOUT_FILENO);
}

// The terminal's width: the window size, else $COLUMNS, else 100.
static int terminal_columns(void) {
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    if (c && atoi(c) >= 20) return atoi(c);
    return 100;
}

ct_status ct_metrics_open(ct_metrics_logger *lg, const char *folder, int total_steps, bool quiet, int resume_step,
                          ct_cfg_progress progress) {
    memset(lg, 0, sizeof *lg);
    lg->quiet = quiet;
    lg->total_steps = total_steps;
    // CTITAN_TTY (set by scripts/run_train.sh) wins: under mpirun stdout is never the terminal.
    lg->tty = progress == CT_CFG_PROGRESS_BAR || (progress == CT_CFG_PROGRESS_AUTO && ct_metrics_user_terminal());
    lg->first_step = resume_step;
    lg->columns = terminal_columns();
    lg->start = ct_now_seconds();
    if (quiet) return CT_OK;
    if (ct_fs_make_dirs(folder)) return CT_ERR;
    char path[1100];
    snprintf(path, sizeof path, "%s/metrics.jsonl", folder);
    if (resume_step > 0 && keep_steps_up_to(path, resume_step)) return CT_ERR;
    if (resume_step == 0 && set_aside(folder, path)) return CT_ERR;
    snprintf(lg->path, sizeof lg->path, "%s", path);
    // A FIFO or folder here is refused (a FIFO would block the first write; set_aside leaves one
    // of size 0 in place), and so is a link: the run owns this name.
    lg->jsonl = ct_file_fopen_write(path, "metrics log",
                                    CT_FILE_WRITE_NOFOLLOW | (resume_step > 0 ? CT_FILE_WRITE_APPEND : 0));
    if (!lg->jsonl) return CT_ERR;
    return CT_OK;
}

// A JSON number, or null for NaN / Inf (which JSON has no spelling for).
static void put_number(FILE *f, const char *key, const char *fmt, double v) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

// s as a JSON string (quotes, backslashes and control characters escaped).
static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static bool write_jsonl(FILE *f, const ct_step_metrics *m) {
    fprintf(f, "{\"step\": %d", m->step);
    put_number(f, "loss", "%.6f", m->loss);
    put_number(f, "grad_norm", "%.6f", m->grad_norm);
    put_number(f, "lr", "%.6e", m->lr);
    put_number(f, "step_seconds", "%.4f", m->step_seconds);
    put_number(f, "tokens_per_s", "%.1f", m->tokens_per_s);
    put_number(f, "tokens_per_s_rank", "%.1f", m->tokens_per_s_rank);
    put_number(f, "tflops", "%.4f", m->tflops);
    put_number(f, "mfu", "%.4f", m->mfu);
    if (m->val_loss >= 0 || isnan(m->val_loss)) put_number(f, "val_loss", "%.6f", m->val_loss);
    if (m->skipped_steps) fprintf(f, ", \"skipped_steps\": %d", m->skipped_steps);
    if (m->moe_aux_loss > 0) put_number(f, "aux_loss", "%.6f", m->moe_aux_loss);
    if (m->moe_pairs > 0) {
        put_number(f, "moe_load_min", "%.4f", m->moe_load_min);
        put_number(f, "moe_load_max", "%.4f", m->moe_load_max);
    }
    if (m->n_data) {
        fprintf(f, ", \"data_tokens\": {");
        for (int d = 0; d < m->n_data; d++) {
            fputs(d ? ", " : "", f);
            put_json_string(f, m->data[d].name);
            fprintf(f, ": %.0f", m->data[d].tokens);
        }
        fputc('}', f);
    }
    fprintf(f, ", \"memory_peak_mib\": {");
    for (int c = 0; c < CT_MEM_NCATEGORIES; c++)
        fprintf(f, "%s\"%s\": %.2f", c ? ", " : "", ct_mem_category_name((ct_mem_category)c), m->mem_peak_mib[c]);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(f, "}, \"time\": %.3f}\n", (double)now.tv_sec + now.tv_nsec * 1e-9);
    return fflush(f) == 0 && !ferror(f);
}

static void format_eta(char *buf, size_t n, double seconds) {
    int s = (int)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, n, "%dh%02dm", s / 3600, s / 60 % 60);
    else
        snprintf(buf, n, "%dm%02ds", s / 60, s % 60);
}

ct_status ct_metrics_enable_tensorboard(ct_metrics_logger *lg, const char *folder) {
    if (lg->quiet) return CT_OK;
    return ct_tb_open(&lg->tb, folder);
}

// One step's scalars to TensorBoard. A failed write is said once (the writer stops writing).
static void log_tensorboard(ct_metrics_logger *lg, const ct_step_metrics *m) {
    double now = ct_tb_wall_time();
    ct_tb_writer *w = &lg->tb;
    ct_status st = ct_tb_add_scalar(w, "loss", m->step, m->loss, now);
    if (!st) st = ct_tb_add_scalar(w, "grad_norm", m->step, m->grad_norm, now);
    if (!st) st = ct_tb_add_scalar(w, "lr", m->step, m->lr, now);
    if (!st) st = ct_tb_add_scalar(w, "tokens_per_s", m->step, m->tokens_per_s, now);
    if (!st) st = ct_tb_add_scalar(w, "mfu", m->step, m->mfu, now);
    if (!st && (m->val_loss >= 0 || isnan(m->val_loss))) st = ct_tb_add_scalar(w, "val_loss", m->step, m->val_loss, now);
    if (!st && m->moe_aux_loss > 0) st = ct_tb_add_scalar(w, "moe/aux_loss", m->step, m->moe_aux_loss, now);
    if (!st && m->moe_pairs > 0) st = ct_tb_add_scalar(w, "moe/load_min", m->step, m->moe_load_min, now);
    if (!st && m->moe_pairs > 0) st = ct_tb_add_scalar(w, "moe/load_max", m->step, m->moe_load_max, now);
    for (int c = 0; c < CT_MEM_NCATEGORIES && !st; c++) {
        char tag[64];
        snprintf(tag, sizeof tag, "memory/%s_mib", ct_mem_category_name((ct_mem_category)c));
        st = ct_tb_add_scalar(w, tag, m->step, m->mem_peak_mib[c], now);
    }
    for (int g = 0; g < m->n_comm && !st; g++) {
        char tag[64];
        snprintf(tag, sizeof tag, "comm/%s/bytes", m->comm[g].group);
        st = ct_tb_add_scalar(w, tag, m->step, m->comm[g].bytes, now);
        snprintf(tag, sizeof tag, "comm/%s/wait_s", m->comm[g].group);
        if (!st) st = ct_tb_add_scalar(w, tag, m->step, m->comm[g].wait_s, now);
    }
    for (int d = 0; d < m->n_data && !st; d++) {
        char tag[96];
        snprintf(tag, sizeof tag, "data/%s/tokens", m->data[d].name);
        st = ct_tb_add_scalar(w, tag, m->step, m->data[d].tokens, now);
    }
    if (!st) st = ct_tb_flush(w);
    if (st) {
        fprintf(stderr, "metrics: WARNING: TensorBoard: %s; no more events are written\n", ct_last_error());
        ct_tb_close(w);
    }
}

void ct_metrics_log(ct_metrics_logger *lg, const ct_step_metrics *m) {
    if (lg->quiet) return;
    if (lg->tb.f) log_tensorboard(lg, m);
    if (lg->jsonl && !lg->write_failed && !write_jsonl(lg->jsonl, m)) {
        lg->write_failed = true;
        fprintf(stderr, "metrics: WARNING: cannot write %s (%s): it ends before step %d\n", lg->path, strerror(errno),
                m->step);
    }
    char val[64] = "";
    if (m->moe_aux_loss > 0) snprintf(val, sizeof val, "  aux %.4f", m->moe_aux_loss);
    if (m->val_loss >= 0 || isnan(m->val_loss))
        snprintf(val + strlen(val), sizeof val - strlen(val), "  val %.4f", m->val_loss);
    char mem[160];
    snprintf(mem, sizeof mem, "mem MiB p %.1f g %.1f o %.1f a %.1f", m->mem_peak_mib[CT_MEM_PARAMS],
             m->mem_peak_mib[CT_MEM_GRADS], m->mem_peak_mib[CT_MEM_OPTIM], m->mem_peak_mib[CT_MEM_ACTIVATIONS]);
    char eta[32];
    double elapsed = ct_now_seconds() - lg->start;  // steps, validation and logging alike
    int done = m->step - lg->first_step;
    format_eta(eta, sizeof eta, done > 0 ? elapsed / done * (lg->total_steps - m->step) : 0.0);
    char extra[80] = "";  // what only some runs have
    if (m->skipped_steps) snprintf(extra, sizeof extra, "  skipped %d", m->skipped_steps);
    if (m->moe_pairs > 0)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "  experts %.2f-%.2f", m->moe_load_min,
                 m->moe_load_max);
    char numbers[512];
    snprintf(numbers, sizeof numbers,
             "step %d/%d  loss %.4f%s  gnorm %.3f  lr %.2e  %.0f tok/s  %.1f ms/step  MFU %.1f%%  %s%s  ETA %s", m->step,
             lg->total_steps, m->loss, val, m->grad_norm, m->lr, m->tokens_per_s, 1e3 * m->step_seconds, 100 * m->mfu,
             mem, extra, eta);
    if (lg->tty) {
        // One line redrawn in place, cut to the terminal's width: a bar, then the numbers.
        int width = 20, filled = lg->total_steps ? (int)((long)width * m->step / lg->total_steps) : width;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        char line[600];
        snprintf(line, sizeof line, "[%s] %s", bar, numbers);
        int cols = lg->columns - 1;
        printf("\r\033[K%.*s", cols > 0 ? cols : 1, line);
        if (m->step == lg->total_steps || m->val_loss >= 0) printf("\n");
    } else {
        printf("%s\n", numbers);
    }
    fflush(stdout);
}

void ct_metrics_close(ct_metrics_logger *lg) {
    ct_tb_close(&lg->tb);
    if (lg->jsonl) fclose(lg->jsonl);
    lg->jsonl = NULL;
}
