// lr schedules: onecycle against PyTorch's OneCycleLR (tests/data/onecycle_torch.txt, written by
// scripts/ref_onecycle.py) and against its formulas; cosine, constant and wsd against their formulas.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "optim/schedule.h"

static double rel_err_(double got, double want) { return fabs(got - want) / fmax(fabs(want), 1e-30); }

// every row of the torch fixture: lr and beta1 of each update within rel 1e-6
static void test_onecycle_torch(void) {
    FILE *f = fopen("tests/data/onecycle_torch.txt", "r");
    CHECK(f != NULL, "onecycle: torch fixture tests/data/onecycle_torch.txt opens (run from the repo root)");
    if (!f) return;
    char line[512];
    int rows = 0, cur_case = -1;
    double worst_lr[3] = {0}, worst_b1[3] = {0};
    Schedule s;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        int ci, three;
        long total, step;
        double pct, max_lr, lr, b1;
        char anneal[16];
        if (sscanf(line, "%d %ld %lf %15s %d %lf %ld %lf %lf", &ci, &total, &pct, anneal, &three, &max_lr, &step,
                   &lr, &b1) != 9 || ci < 0 || ci > 2)
            continue;
        if (ci != cur_case) {
            schedule_default(&s, SCHED_ONECYCLE, max_lr, total);
            s.pct_start = pct;
            s.anneal = strcmp(anneal, "linear") == 0 ? ANNEAL_LINEAR : ANNEAL_COS;
            s.three_phase = three;
            Err e = {{0}};
            CHECK(schedule_check(&s, &e) == 0, "onecycle case %d (pct %g, %s, three_phase %d) valid: %.200s", ci, pct,
                  anneal, three, e.msg);
            cur_case = ci;
        }
        double el = rel_err_(schedule_lr(&s, step), lr), eb = rel_err_(schedule_beta1(&s, step, 0.9f), b1);
        if (el > worst_lr[ci]) worst_lr[ci] = el;
        if (eb > worst_b1[ci]) worst_b1[ci] = eb;
        rows++;
    }
    fclose(f);
    CHECK(rows == 300, "onecycle: fixture has 3 cases x 100 steps (%d rows)", rows);
    for (int ci = 0; ci < 3; ci++) {
        CHECK(worst_lr[ci] <= 1e-6, "onecycle case %d: lr matches torch at all 100 steps (worst rel err %.3g)", ci,
              worst_lr[ci]);
        CHECK(worst_b1[ci] <= 1e-6, "onecycle case %d: beta1 matches torch at all 100 steps (worst rel err %.3g)", ci,
              worst_b1[ci]);
    }
}

static void test_onecycle_formulas(void) {
    Schedule s;
    schedule_default(&s, SCHED_ONECYCLE, 1e-3, 100);
    s.pct_start = 0.3;
    double init = 1e-3 / 25, fin = init / 1e4;
    CHECK_NEAR(schedule_lr(&s, 0), init, 0, 1e-6, "onecycle: step 0 = max_lr/div_factor");
    CHECK_NEAR(schedule_lr(&s, 29), 1e-3, 0, 1e-6, "onecycle: step pct*N-1 = 29 is the peak");
    CHECK_NEAR(schedule_lr(&s, 99), fin, 0, 1e-6, "onecycle: last step = initial/final_div_factor");
    // middle of the anneal: pct = (64 - 29) / (99 - 29) = 0.5 -> halfway between peak and min
    CHECK_NEAR(schedule_lr(&s, 64), fin + (1e-3 - fin) / 2, 0, 1e-6, "onecycle: middle of the anneal is halfway");
    // middle of the rise: pct = 14.5/29 at step 14.5 -> step 10: pct 10/29
    double p = 10.0 / 29.0;
    CHECK_NEAR(schedule_lr(&s, 10), 1e-3 + (init - 1e-3) / 2 * (1 + cos(M_PI * p)), 0, 1e-6, "onecycle: rise formula");
    int rise_up = 1, fall_down = 1, mom_down = 1, mom_up = 1;
    for (long i = 1; i < 100; i++) {
        float a = schedule_lr(&s, i - 1), b = schedule_lr(&s, i);
        float ma = schedule_beta1(&s, i - 1, 0.9f), mb = schedule_beta1(&s, i, 0.9f);
        if (i <= 29) { rise_up &= b > a; mom_down &= mb < ma; }
        else { fall_down &= b < a; mom_up &= mb > ma; }
    }
    CHECK(rise_up && fall_down, "onecycle: lr strictly rises to step 29 then strictly falls");
    CHECK(mom_down && mom_up, "onecycle: beta1 moves inversely (falls while lr rises, then rises)");
    CHECK_NEAR(schedule_beta1(&s, 0, 0.9f), 0.95, 0, 1e-6, "onecycle: beta1 starts at max_momentum");
    CHECK_NEAR(schedule_beta1(&s, 29, 0.9f), 0.85, 0, 1e-6, "onecycle: beta1 at the peak is base_momentum");
    CHECK_NEAR(schedule_beta1(&s, 99, 0.9f), 0.95, 0, 1e-6, "onecycle: beta1 ends at max_momentum");
    CHECK(schedule_lr(&s, 500) == schedule_lr(&s, 99) && schedule_lr(&s, -3) == schedule_lr(&s, 0),
          "onecycle: steps outside 0..N-1 are clamped");
    s.cycle_momentum = 0;
    CHECK(schedule_beta1(&s, 29, 0.9f) == 0.9f, "onecycle without cycle_momentum: beta1 is the default");
    // the RFA paper's 5% warmup: peak at update 4 of 100
    s.pct_start = 0.05;
    CHECK_NEAR(schedule_lr(&s, 4), 1e-3, 0, 1e-6, "onecycle pct_start 0.05: peak at step 4");
    // a one-step rise (pct_start*N == 1) would divide by zero in PyTorch: here the phase counts as done
    schedule_default(&s, SCHED_ONECYCLE, 1e-3, 20);
    s.pct_start = 0.05;
    CHECK_NEAR(schedule_lr(&s, 0), 1e-3, 0, 1e-6, "onecycle zero-length rise: step 0 is the peak, finite");
    CHECK(schedule_beta1(&(Schedule){.kind = SCHED_COSINE}, 3, 0.9f) == 0.9f, "non-onecycle: beta1 is the default");
}

static void test_cosine_constant(void) {
    Schedule s;
    schedule_default(&s, SCHED_COSINE, 6e-4, 110);
    s.warmup_steps = 10;
    s.min_lr_frac = 0.1;
    CHECK_NEAR(schedule_lr(&s, 0), 6e-4 * 1 / 10, 0, 1e-6, "cosine: warmup step 0 = lr*(0+1)/W");
    CHECK_NEAR(schedule_lr(&s, 4), 6e-4 * 5 / 10, 0, 1e-6, "cosine: warmup step 4 = lr*5/W");
    CHECK_NEAR(schedule_lr(&s, 9), 6e-4, 0, 1e-6, "cosine: last warmup step reaches the peak");
    CHECK_NEAR(schedule_lr(&s, 10), 6e-4, 0, 1e-6, "cosine: first decay step is the peak (ratio 0)");
    CHECK_NEAR(schedule_lr(&s, 60), 6e-5 + (6e-4 - 6e-5) * 0.5, 0, 1e-6, "cosine: halfway (ratio 0.5)");
    double r = 99.0 / 100.0;
    CHECK_NEAR(schedule_lr(&s, 109), 6e-5 + (6e-4 - 6e-5) * 0.5 * (1 + cos(M_PI * r)), 0, 1e-6,
               "cosine: last step, ratio (N-1-W)/(N-W)");
    int mono = 1;
    for (long i = 11; i < 110; i++) mono &= schedule_lr(&s, i) < schedule_lr(&s, i - 1);
    CHECK(mono && schedule_lr(&s, 109) >= 6e-5f, "cosine: strictly decreasing after warmup, stays above min");
    schedule_default(&s, SCHED_CONSTANT, 1e-3, 50);
    CHECK(schedule_lr(&s, 0) == 1e-3f && schedule_lr(&s, 49) == 1e-3f, "constant: lr at every step");
    s.warmup_steps = 4;
    CHECK_NEAR(schedule_lr(&s, 1), 1e-3 * 2 / 4, 0, 1e-6, "constant with warmup: step 1 = lr*2/4");
    CHECK(schedule_lr(&s, 4) == 1e-3f, "constant with warmup: peak after the warmup");
}

static void test_wsd(void) {
    Schedule s;
    schedule_default(&s, SCHED_WSD, 1e-3, 100);
    s.warmup_steps = 5;
    s.decay_frac = 0.2;   // decay = last 20 updates, 80..99
    s.final_lr_frac = 0.0;
    Err e = {{0}};
    CHECK(schedule_check(&s, &e) == 0, "wsd: valid %.200s", e.msg);
    CHECK_NEAR(schedule_lr(&s, 2), 1e-3 * 3 / 5, 0, 1e-6, "wsd: warmup");
    CHECK(schedule_lr(&s, 5) == 1e-3f && schedule_lr(&s, 79) == 1e-3f, "wsd: stable phase at the peak");
    CHECK(schedule_lr(&s, 80) == 1e-3f, "wsd: first decay step p=0 still the peak");
    CHECK_NEAR(schedule_lr(&s, 90), 1e-3 * 0.5, 0, 1e-6, "wsd linear: p=0.5 halfway");
    CHECK_NEAR(schedule_lr(&s, 99), 1e-3 * 1 / 20, 0, 1e-6, "wsd linear: last step p=19/20");
    s.decay_shape = WSD_SQRT;
    s.final_lr_frac = 0.1;
    CHECK_NEAR(schedule_lr(&s, 85), 1e-4 + 9e-4 * (1 - sqrt(0.25)), 0, 1e-6, "wsd 1-sqrt: p=0.25");
    int mono = 1;
    for (long i = 81; i < 100; i++) mono &= schedule_lr(&s, i) < schedule_lr(&s, i - 1);
    CHECK(mono && schedule_lr(&s, 99) > 1e-4f, "wsd 1-sqrt: strictly decreasing, above final");
}

static void test_checks(void) {
    Schedule s;
    Err e = {{0}};
    schedule_default(&s, SCHED_WSD, 1e-3, 100);
    s.warmup_steps = 90;
    CHECK(schedule_check(&s, &e) == -1, "wsd: warmup + decay > total rejected");
    CHECK_CONTAINS(e.msg, "warmup_steps", "wsd overlap message names warmup_steps");
    schedule_default(&s, SCHED_ONECYCLE, 1e-3, 100);
    s.pct_start = 1.5;
    CHECK(schedule_check(&s, &e) == -1, "onecycle: pct_start 1.5 rejected");
    CHECK_CONTAINS(e.msg, "pct_start", "pct_start message");
    schedule_default(&s, SCHED_COSINE, 0, 100);
    CHECK(schedule_check(&s, &e) == -1, "lr 0 rejected");
    schedule_default(&s, SCHED_COSINE, 1e-3, 0);
    CHECK(schedule_check(&s, &e) == -1, "total_steps 0 rejected");
    ScheduleKind k;
    CHECK(schedule_kind_parse("onecycle", &k, &e) == 0 && k == SCHED_ONECYCLE, "kind parse onecycle");
    CHECK(schedule_kind_parse("cosin", &k, &e) == -1, "kind parse rejects a typo");
    CHECK_CONTAINS(e.msg, "cosin", "kind parse message names the value");
    CHECK_STR(schedule_kind_name(SCHED_WSD), "wsd", "kind name");
}

int main(void) {
    test_onecycle_torch();
    test_onecycle_formulas();
    test_cosine_constant();
    test_wsd();
    test_checks();
    return test_summary();
}
