// The floats of a linear recurrence's log-decay g for each decay form (nn/linrec.h: none, (H,), (B,T,H),
// (B,T,H,Dk), (B,T,H,Dv)), shared by the host and GPU tests of the engine.
#ifndef SEQ_TEST_LINREC_G_H
#define SEQ_TEST_LINREC_G_H

#include <stddef.h>
#include "nn/linrec.h"

static inline size_t linrec_g_size(const LinrecDims *d) {
    size_t BTH = (size_t)d->B * d->T * d->H;
    switch (d->decay) {
    case LINREC_HEAD: return (size_t)d->H;
    case LINREC_TOKEN: return BTH;
    case LINREC_CHANNEL: return BTH * d->Dk;
    case LINREC_VCHANNEL: return BTH * d->Dv;
    default: return 0;
    }
}

#endif
