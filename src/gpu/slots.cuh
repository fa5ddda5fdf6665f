/*
 * The softmax over a row of slots, and its backward: gsa's M slots (all visible) and bla's 2M - 1 (each position
 * sees a prefix of them, nn/bla.h). A thread per row, the sums in double in the host's order, so the host's numbers
 * up to expf's rounding and two runs give the same bits.
 */
#ifndef SEQ_GPU_SLOTS_CUH
#define SEQ_GPU_SLOTS_CUH

#include <stddef.h>

// p (R,S) WRITTEN (may be x) = each row of x (R,S) through a softmax over the slots it sees, 0 for the hidden: all S
// when period <= 0, else bla's slots s with round(s period / S) <= t, for row r at position t = t0 + (r / H) % T
void gpu_slot_softmax(float *p, const float *x, size_t R, int S, int T, int H, long t0, double period);
// dok (R,S) WRITTEN = p (.) (dp - p . dp) per row, the dot product in double (a hidden slot, p = 0, gets 0)
void gpu_slot_softmax_backward(float *dok, const float *p, const float *dp, size_t R, int M);

#endif
