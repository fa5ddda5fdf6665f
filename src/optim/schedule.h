/*
 * Learning-rate (and β1) schedules: constant, cosine, onecycle, wsd.
 *
 * Step convention (all kinds): `step` is the 0-based index of the optimizer update, s = 0..total_steps-1,
 * and schedule_lr(s) is the lr that update s uses. This is PyTorch's convention for a scheduler whose
 * step() is called after every optimizer.step(): the scheduler's constructor sets the lr of update 0 and
 * update s sees `last_epoch == s`. Steps past the end are clamped to total_steps-1 (PyTorch's OneCycleLR
 * raises instead; a trainer that runs a few extra steps should not crash), negative steps to 0.
 *
 * Formulas (peak = lr, W = warmup_steps, N = total_steps):
 *   constant  s < W: peak*(s+1)/W          else peak
 *   cosine    s < W: peak*(s+1)/W          else min + (peak-min)/2 * (1 + cos(pi*(s-W)/(N-W)))
 *             min = peak*min_lr_frac. This is llm.c's schedulers.h form: update W uses the peak again
 *             and the last update uses slightly more than min (the ratio reaches 1 one step after the end).
 *   onecycle  PyTorch OneCycleLR exactly: initial = peak/div_factor, min = initial/final_div_factor;
 *             phase ends e1 = pct_start*N - 1 (and e2 = 2*pct_start*N - 2 for three_phase), last = N-1;
 *             in the phase [start, end] containing s (the first with s <= end, or the last phase),
 *             pct = (s - start)/(end - start) and value = anneal(phase_start_value, phase_end_value, pct),
 *             anneal cos: end + (start-end)/2 * (1 + cos(pi*pct)), linear: start + (end-start)*pct.
 *             Two phases: initial -> peak, peak -> min. Three: initial -> peak, peak -> initial, initial -> min.
 *             β1 (cycle_momentum) runs inversely: max_momentum -> base_momentum while lr rises, then back
 *             (three_phase: max -> base, base -> max, max -> max). A zero-length phase (pct_start*N == 1)
 *             makes PyTorch divide by zero; here it counts as finished (pct = 1).
 *   wsd       warmup (optional, as above), then the peak, then over the last D = round(decay_frac*N) updates
 *             (they start at update N-D) p = (s - (N-D))/D in [0, 1) and
 *               linear: final + (peak-final)*(1 - p)       1-sqrt: final + (peak-final)*(1 - sqrt(p))
 *             with final = peak*final_lr_frac (same progress convention as cosine; 1-sqrt is llm.c's
 *             wsd shape, linear is nanochat's warmdown). Warmup and decay must not overlap.
 *
 * Parameter groups with their own peak lr are scaled by schedule_lr(s)/lr, the same factor as the global
 * lr (see optim.h), so every group follows the same shape.
 */
#ifndef SEQ_SCHEDULE_H
#define SEQ_SCHEDULE_H

#include "core/err.h"

typedef enum { SCHED_CONSTANT, SCHED_COSINE, SCHED_ONECYCLE, SCHED_WSD } ScheduleKind;
typedef enum { ANNEAL_COS, ANNEAL_LINEAR } AnnealKind;
typedef enum { WSD_LINEAR, WSD_SQRT } WsdShape;  // WSD_SQRT is the 1-sqrt shape

typedef struct Schedule {
    ScheduleKind kind;
    double lr;              // peak lr (onecycle: max_lr)
    long total_steps;       // number of optimizer updates, > 0
    long warmup_steps;      // constant, cosine, wsd: linear warmup length (0 = none)
    double min_lr_frac;     // cosine: min lr = lr * min_lr_frac (default 0)
    // onecycle (defaults are PyTorch's)
    double pct_start;       // fraction of steps spent rising (0.3)
    double div_factor;      // initial lr = lr / div_factor (25)
    double final_div_factor;  // min lr = initial lr / final_div_factor (1e4)
    int three_phase;        // 0
    AnnealKind anneal;      // ANNEAL_COS
    int cycle_momentum;     // cycle β1 inversely to the lr (1)
    double base_momentum;   // 0.85
    double max_momentum;    // 0.95
    // wsd
    double decay_frac;      // fraction of total_steps in the final decay (0.2)
    WsdShape decay_shape;   // WSD_LINEAR
    double final_lr_frac;   // lr at the end of the decay = lr * final_lr_frac (0)
} Schedule;

// fill every field with its default for `kind` (values above); the caller then overrides what it sets
void schedule_default(Schedule *s, ScheduleKind kind, double lr, long total_steps);
// validate the fields (ranges, warmup/decay fitting into total_steps); -1 with a message naming the field
int schedule_check(const Schedule *s, Err *e);
// "constant" | "cosine" | "onecycle" | "wsd" <-> kind; parse returns -1 and lists the accepted names
const char *schedule_kind_name(ScheduleKind k);
int schedule_kind_parse(const char *name, ScheduleKind *out, Err *e);

// lr of update `step` (0-based, see the convention above)
float schedule_lr(const Schedule *s, long step);
// β1 of update `step`: the cycled momentum for onecycle with cycle_momentum, default_beta1 otherwise
float schedule_beta1(const Schedule *s, long step, float default_beta1);

#endif
