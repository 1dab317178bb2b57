// Pictures of a pipeline step (train/pipeline_trace.h) drawn from simulated timelines: the text
// grid cell by cell, the Chrome trace's event count per rank and its times, the SVG's rects,
// the writer chosen by suffix, a write that cannot happen, and the textbook bubbles against the
// simulator (default costs). The measured path (a 2-rank training run writing its trace) is in
// tests/test_pipeline_cli.sh.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "train/pipeline_trace.h"

typedef struct {
    int pp;
    ct_schedule lists[8];
    ct_pp_sim_result sim;
    ct_pp_timeline tl;
} simulated;

static simulated *simulate(ct_pp_kind kind, int pp, int vpp, int n_mb) {
    simulated *s = calloc(1, sizeof *s);
    s->pp = pp;
    int stage_rank[32];
    if (ct_pp_generate(kind, pp, vpp, n_mb, s->lists)) ct_fatal("test", "%s", ct_last_error());
    ct_pp_stage_ranks(ct_pp_kind_placement(kind), pp, vpp, stage_rank);
    if (ct_pp_simulate(s->lists, pp, stage_rank, pp * vpp, n_mb, NULL, &s->sim)) ct_fatal("test", "%s", ct_last_error());
    s->tl = ct_pp_timeline_of_sim(s->lists, &s->sim);
    return s;
}

static void release(simulated *s) {
    ct_pp_sim_result_free(&s->sim);
    ct_pp_lists_free(s->lists, s->pp);
    free(s);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = calloc((size_t)n + 1, 1);
    if (fread(t, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    return t;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_grid_gpipe(void) {
    simulated *s = simulate(CT_PP_GPIPE, 2, 1, 2);
    char *g = ct_pp_trace_grid(&s->tl, 1.0, 0);
    const char *want = "time   |0                   5\n"
                       "rank 0 |0F0 0F1 .   .   .   0B0~~~~ 0B1~~~~\n"
                       "rank 1 |.   1F0 1F1 1B0~~~~ 1B1~~~~ .   .\n";
    CHECK(!strcmp(g, want), "got\n%s", g);
    free(g);
    release(s);
}

static void test_grid_interleaved_and_cut(void) {
    simulated *s = simulate(CT_PP_INTERLEAVED_1F1B, 4, 2, 8);
    char *g = ct_pp_trace_grid(&s->tl, 1.0, 0);
    // Rank 0 starts with four forwards of stage 0, then stage 4 (its second virtual stage).
    CHECK(!strncmp(strstr(g, "rank 0 |"), "rank 0 |0F0 0F1 0F2 0F3 4F0", 27), "%s", g);
    CHECK(!strncmp(strstr(g, "rank 3 |"), "rank 3 |.   .   .   3F0", 23), "%s", g);
    CHECK(count_of(g, "\n") == 5, "header + 4 ranks");
    // Every compute action appears once: 2 stages x 8 micro-batches x (F + B) per rank.
    CHECK(count_of(g, "F") == 64 && count_of(g, "B") == 64, "F %d B %d", count_of(g, "F"), count_of(g, "B"));
    free(g);
    g = ct_pp_trace_grid(&s->tl, 1.0, 10);
    CHECK(count_of(g, " ...\n") == 5, "every line cut:\n%s", g);
    const char *r0 = strstr(g, "rank 0 |");
    CHECK(strchr(r0, '\n') - r0 == (long)strlen("rank 0 |0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 ..."),
          "cut at 10 columns:\n%s", g);
    free(g);
    release(s);
}

static void test_chrome_events_per_rank(void) {
    simulated *s = simulate(CT_PP_ZB_H1, 2, 1, 4);
    char path[] = "/tmp/ct_test_trace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(ct_pp_trace_write_chrome(path, &s->tl) == CT_OK, "%s", ct_last_error());
    char *t = slurp(path);
    CHECK(t && !strncmp(t, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 41), "header");
    CHECK(t && strstr(t, "\n]}\n"), "closed");
    for (int r = 0; r < 2; r++) {
        char key[64];
        snprintf(key, sizeof key, "\"ph\": \"X\", \"pid\": %d,", r);
        CHECK(count_of(t, key) == s->lists[r].count, "rank %d: %d events for %d actions", r, count_of(t, key),
              s->lists[r].count);
    }
    // Simulator units are drawn as milliseconds: rank 1's first forward starts at 1 unit.
    CHECK(strstr(t, "{\"name\": \"1F0\", \"cat\": \"F\", \"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": 1000.000, "
                    "\"dur\": 1000.000"),
          "1F0 at 1 ms for 1 ms");
    CHECK(strstr(t, "\"name\": \"0W3\", \"cat\": \"W\""), "weight-gradient events");
    CHECK(count_of(t, "\"ph\": \"M\"") == 2 + 2 * 2, "process + stage + step lane names");
    free(t);
    unlink(path);
    release(s);
}

static void test_svg_and_suffix(void) {
    simulated *s = simulate(CT_PP_1F1B, 2, 1, 4);
    char path[] = "/tmp/ct_test_trace_XXXXXX.svg";
    int fd = mkstemps(path, 4);
    close(fd);
    CHECK(ct_pp_trace_write(path, &s->tl, "1F1B <test>") == CT_OK, "%s", ct_last_error());
    char *t = slurp(path);
    CHECK(t && !strncmp(t, "<svg ", 5) && strstr(t, "</svg>\n"), "an SVG document");
    // One titled rect per action that takes time: the 8 F and 8 B on each of 2 ranks
    // (simulated sends and receives take none).
    CHECK(count_of(t, "<title>") == 2 * 8, "%d rects", count_of(t, "<title>"));
    CHECK(count_of(t, "fill=\"#59a14f\"") == 8 + 1, "8 backward rects + legend");
    free(t);
    unlink(path);
    release(s);
}

static void test_write_error_names_path(void) {
    simulated *s = simulate(CT_PP_GPIPE, 2, 1, 2);
    CHECK(ct_pp_trace_write("/nonexistent/dir/t.json", &s->tl, NULL) == CT_ERR, "refused");
    CHECK(strstr(ct_last_error(), "/nonexistent/dir/t.json"), "%s", ct_last_error());
    CHECK(ct_pp_trace_write("/nonexistent/dir/t.svg", &s->tl, NULL) == CT_ERR, "refused");
    release(s);
}

static void test_textbook_matches_simulator(void) {
    static const struct {
        ct_pp_kind kind;
        int pp, vpp, m;
    } cases[] = {{CT_PP_GPIPE, 4, 1, 8},          {CT_PP_1F1B, 4, 1, 8},       {CT_PP_1F1B, 2, 1, 4},
                 {CT_PP_INTERLEAVED_1F1B, 4, 2, 8}, {CT_PP_LOOPED_BFS, 2, 3, 6}, {CT_PP_ZB_H1, 4, 1, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        simulated *s = simulate(cases[i].kind, cases[i].pp, cases[i].vpp, cases[i].m);
        const char *f;
        double tb = ct_pp_textbook_bubble(cases[i].kind, cases[i].pp, cases[i].vpp, cases[i].m, NULL, &f);
        CHECK_CLOSE(s->sim.bubble, tb, 1e-9, 1e-12);
        release(s);
    }
    const char *f;
    CHECK_CLOSE(ct_pp_textbook_bubble(CT_PP_GPIPE, 4, 1, 8, NULL, &f), 3.0 / 11, 1e-12, 0);
    CHECK(!strcmp(f, "(p-1)/(m+p-1)"), "%s", f);
    CHECK_CLOSE(ct_pp_textbook_bubble(CT_PP_INTERLEAVED_1F1B, 4, 2, 8, NULL, &f), 3.0 / 19, 1e-12, 0);
    CHECK(ct_pp_textbook_bubble(CT_PP_ZBV, 2, 2, 4, NULL, &f) == -1 && !strcmp(f, "none"), "ZBV has none");
    // ZB-H1 with measured costs: (p-1)(F+I-W) / (m(F+I+W) + (p-1)(F+I-W)).
    ct_pp_costs c = ct_pp_costs_default();
    c.cost[CT_ACT_FORWARD] = 2, c.cost[CT_ACT_BACKWARD_INPUT] = 3, c.cost[CT_ACT_BACKWARD_WEIGHT] = 1;
    CHECK_CLOSE(ct_pp_textbook_bubble(CT_PP_ZB_H1, 4, 1, 8, &c, &f), 12.0 / (48 + 12), 1e-12, 0);
}

int main(void) {
    CT_RUN(test_grid_gpipe);
    CT_RUN(test_grid_interleaved_and_cut);
    CT_RUN(test_chrome_events_per_rank);
    CT_RUN(test_svg_and_suffix);
    CT_RUN(test_write_error_names_path);
    CT_RUN(test_textbook_matches_simulator);
    CT_TEST_EXIT();
}
