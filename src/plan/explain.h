// The planner's words: the walk to the best layout (--explain) and the refusal when nothing fits.
#ifndef CT_PLAN_EXPLAIN_H
#define CT_PLAN_EXPLAIN_H
#include <stdio.h>

#include "plan/plan.h"

// The decision for the best candidate, step by step, from the searched candidates (all of them,
// fitting or not, as ct_plan_search returns them): does the model fit with data sharding alone;
// if not, tensor parallel within a node; if still not, pipeline across nodes; context parallel
// when one sequence's activations do not fit; then checkpointing and precision. Every figure
// quoted is a candidate's prediction.
void ct_plan_explain(const ct_plan_request *r, const ct_plan_candidate *all, int n, FILE *f);

// No candidate fits: writes one line (no newline) into buf saying by how much the smallest one
// misses and what would make it fit (more devices -- searched, not guessed -- or a device with
// more memory).
void ct_plan_refusal(const ct_plan_request *r, const ct_plan_candidate *all, int n, char *buf, size_t len);
#endif
