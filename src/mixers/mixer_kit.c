/*
 * The out-of-line half of mixers/mixer_kit.h: tensor declaration under a layer prefix, the head-size and
 * width resolution every multi-head mixer does in its check, and the list of decoding-state terms.
 */
#include "mixers/mixer_kit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int mixer_heads_resolve(const char *path, int C, int heads, int head_dim, int max_dim, int *D, Err *e) {
    if (head_dim == 0) {
        if (C % heads) return err_set(e, "%s.heads: %d does not divide the model width %d; set head_dim", path, heads, C);
        *D = C / heads;
    } else {
        *D = head_dim;
    }
    if (max_dim > 0 && *D > max_dim) return err_set(e, "%s.head_dim: %d is above %d", path, *D, max_dim);
    return 0;
}

int mixer_widths_resolve(const char *path, int C, int heads, double expand_k, double expand_v, int *HK, int *HV,
                         Err *e) {
    *HK = (int)lround(expand_k * C);
    *HV = (int)lround(expand_v * C);
    if (*HK < heads || *HK % heads)
        return err_set(e, "%s.expand_k: the key width %g x %d = %d is not a multiple of heads %d", path, expand_k, C,
                       *HK, heads);
    if (*HV < heads || *HV % heads)
        return err_set(e, "%s.expand_v: the value width %g x %d = %d is not a multiple of heads %d", path, expand_v, C,
                       *HV, heads);
    return 0;
}

int mixer_param_add(ParamTable *pt, const char *prefix, const char *suffix, int ndim, const int *shape,
                    ParamInit init, int decay, Err *e) {
    char name[PARAM_NAME_MAX];
    // snprintf truncates silently, and a truncated name is another tensor's name or a wrong one: say so
    int n = snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    if (n < 0 || (size_t)n >= sizeof name)
        return err_set(e, "parameter name '%s.%s' is too long (at most %d characters)", prefix, suffix,
                       PARAM_NAME_MAX - 1);
    return param_add(pt, name, ndim, shape, init, decay, e);
}

void state_terms_add(StateTerms *st, int table1, size_t value, const char *name, const char *fmt, ...) {
    if (st->n >= STATE_TERMS_MAX) {  // a mixer that names more terms than the struct holds: fix the constant
        fprintf(stderr, "state_terms_add: more than %d terms (adding \"%s\")\n", STATE_TERMS_MAX, name);
        abort();
    }
    StateTerm *t = &st->t[st->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->formula, sizeof t->formula, fmt, ap);
    va_end(ap);
    t->value = value;
    t->table1 = table1;
}
