#include "optim/schedule.h"

#include <math.h>
#include <string.h>

void schedule_default(Schedule *s, ScheduleKind kind, double lr, long total_steps) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->lr = lr;
    s->total_steps = total_steps;
    s->pct_start = 0.3;
    s->div_factor = 25.0;
    s->final_div_factor = 1e4;
    s->anneal = ANNEAL_COS;
    s->cycle_momentum = 1;
    s->base_momentum = 0.85;
    s->max_momentum = 0.95;
    s->decay_frac = 0.2;
    s->decay_shape = WSD_LINEAR;
}

static const char *const kind_names_[] = {"constant", "cosine", "onecycle", "wsd"};

const char *schedule_kind_name(ScheduleKind k) {
    return (k >= SCHED_CONSTANT && k <= SCHED_WSD) ? kind_names_[k] : "?";
}

int schedule_kind_parse(const char *name, ScheduleKind *out, Err *e) {
    for (int k = SCHED_CONSTANT; k <= SCHED_WSD; k++)
        if (strcmp(name, kind_names_[k]) == 0) {
            *out = (ScheduleKind)k;
            return 0;
        }
    return err_set(e, "unknown lr schedule '%s' (expected constant, cosine, onecycle or wsd)", name);
}

// decay steps of wsd: round(decay_frac * N), as nanochat rounds its warmdown ratio
static long wsd_decay_steps_(const Schedule *s) {
    return (long)llround(s->decay_frac * (double)s->total_steps);
}

int schedule_check(const Schedule *s, Err *e) {
    const char *k = schedule_kind_name(s->kind);
    if (s->kind < SCHED_CONSTANT || s->kind > SCHED_WSD) return err_set(e, "schedule: invalid kind %d", (int)s->kind);
    if (!(s->lr > 0) || !isfinite(s->lr)) return err_set(e, "schedule %s: lr must be > 0, got %g", k, s->lr);
    if (s->total_steps < 1) return err_set(e, "schedule %s: total_steps must be >= 1, got %ld", k, s->total_steps);
    if (s->warmup_steps < 0 || s->warmup_steps > s->total_steps)
        return err_set(e, "schedule %s: warmup_steps %ld is outside 0..total_steps (%ld)", k, s->warmup_steps,
                       s->total_steps);
    switch (s->kind) {
    case SCHED_CONSTANT:
        break;
    case SCHED_COSINE:
        if (!(s->min_lr_frac >= 0 && s->min_lr_frac <= 1))
            return err_set(e, "schedule cosine: min_lr_frac must be in [0, 1], got %g", s->min_lr_frac);
        break;
    case SCHED_ONECYCLE:
        if (s->warmup_steps != 0)
            return err_set(e, "schedule onecycle: warmup_steps is not used (the rise is pct_start of the steps); "
                              "set pct_start instead");
        if (!(s->pct_start >= 0 && s->pct_start <= 1))
            return err_set(e, "schedule onecycle: pct_start must be in [0, 1], got %g", s->pct_start);
        if (s->three_phase && s->pct_start > 0.5)
            return err_set(e, "schedule onecycle: three_phase needs pct_start <= 0.5 (two rising/falling phases "
                              "of pct_start each), got %g", s->pct_start);
        if (!(s->div_factor > 0) || !(s->final_div_factor > 0))
            return err_set(e, "schedule onecycle: div_factor (%g) and final_div_factor (%g) must be > 0",
                           s->div_factor, s->final_div_factor);
        if (s->anneal != ANNEAL_COS && s->anneal != ANNEAL_LINEAR)
            return err_set(e, "schedule onecycle: invalid anneal strategy %d", (int)s->anneal);
        if (s->cycle_momentum && !(s->base_momentum >= 0 && s->base_momentum <= s->max_momentum &&
                                   s->max_momentum < 1))
            return err_set(e, "schedule onecycle: need 0 <= base_momentum (%g) <= max_momentum (%g) < 1",
                           s->base_momentum, s->max_momentum);
        break;
    case SCHED_WSD: {
        if (!(s->decay_frac >= 0 && s->decay_frac <= 1))
            return err_set(e, "schedule wsd: decay_frac must be in [0, 1], got %g", s->decay_frac);
        if (!(s->final_lr_frac >= 0 && s->final_lr_frac <= 1))
            return err_set(e, "schedule wsd: final_lr_frac must be in [0, 1], got %g", s->final_lr_frac);
        if (s->decay_shape != WSD_LINEAR && s->decay_shape != WSD_SQRT)
            return err_set(e, "schedule wsd: invalid decay shape %d", (int)s->decay_shape);
        long d = wsd_decay_steps_(s);
        if (s->warmup_steps + d > s->total_steps)
            return err_set(e, "schedule wsd: warmup_steps (%ld) + decay steps (%ld = decay_frac %g x %ld) exceed "
                              "total_steps", s->warmup_steps, d, s->decay_frac, s->total_steps);
        break;
    }
    }
    return 0;
}

// PyTorch's two anneal functions: value at fraction pct of the way from a to b
static double anneal_(AnnealKind kind, double a, double b, double pct) {
    if (kind == ANNEAL_LINEAR) return (b - a) * pct + a;
    return b + (a - b) / 2.0 * (cos(M_PI * pct) + 1.0);
}

// onecycle: fills the lr and momentum of step (already clamped to 0..N-1)
static void onecycle_(const Schedule *s, long step, double *lr, double *mom) {
    double n = (double)s->total_steps;
    double initial = s->lr / s->div_factor, min_lr = initial / s->final_div_factor;
    double bm = s->base_momentum, mm = s->max_momentum;
    // phase table as PyTorch builds it: end step, lr from->to, momentum from->to
    double end[3], lr_a[3], lr_b[3], m_a[3], m_b[3];
    int np;
    if (s->three_phase) {
        np = 3;
        end[0] = s->pct_start * n - 1; lr_a[0] = initial; lr_b[0] = s->lr;  m_a[0] = mm; m_b[0] = bm;
        end[1] = 2 * s->pct_start * n - 2; lr_a[1] = s->lr; lr_b[1] = initial; m_a[1] = bm; m_b[1] = mm;
        end[2] = n - 1; lr_a[2] = initial; lr_b[2] = min_lr; m_a[2] = mm; m_b[2] = mm;
    } else {
        np = 2;
        end[0] = s->pct_start * n - 1; lr_a[0] = initial; lr_b[0] = s->lr; m_a[0] = mm; m_b[0] = bm;
        end[1] = n - 1; lr_a[1] = s->lr; lr_b[1] = min_lr; m_a[1] = bm; m_b[1] = mm;
    }
    double x = (double)step, start = 0;
    for (int i = 0; i < np; i++) {
        if (x <= end[i] || i == np - 1) {
            double len = end[i] - start;
            double pct = len != 0 ? (x - start) / len : 1.0;
            *lr = anneal_(s->anneal, lr_a[i], lr_b[i], pct);
            *mom = anneal_(s->anneal, m_a[i], m_b[i], pct);
            return;
        }
        start = end[i];
    }
}

float schedule_lr(const Schedule *s, long step) {
    long n = s->total_steps, w = s->warmup_steps;
    if (step >= n) step = n - 1;
    if (step < 0) step = 0;
    double peak = s->lr;
    if (s->kind == SCHED_ONECYCLE) {
        double lr, mom;
        onecycle_(s, step, &lr, &mom);
        return (float)lr;
    }
    if (step < w) return (float)(peak * (double)(step + 1) / (double)w);
    switch (s->kind) {
    case SCHED_COSINE: {
        double min_lr = peak * s->min_lr_frac;
        double ratio = (double)(step - w) / (double)(n - w);
        return (float)(min_lr + (peak - min_lr) * 0.5 * (1.0 + cos(M_PI * ratio)));
    }
    case SCHED_WSD: {
        long d = wsd_decay_steps_(s), start = n - d;
        if (step < start) return (float)peak;
        double fin = peak * s->final_lr_frac, p = (double)(step - start) / (double)d;
        double keep = s->decay_shape == WSD_SQRT ? 1.0 - sqrt(p) : 1.0 - p;
        return (float)(fin + (peak - fin) * keep);
    }
    default:
        return (float)peak;
    }
}

float schedule_beta1(const Schedule *s, long step, float default_beta1) {
    if (s->kind != SCHED_ONECYCLE || !s->cycle_momentum) return default_beta1;
    if (step >= s->total_steps) step = s->total_steps - 1;
    if (step < 0) step = 0;
    double lr, mom;
    onecycle_(s, step, &lr, &mom);
    return (float)mom;
}
