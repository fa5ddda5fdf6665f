/*
 * The head permutation between a projection's output (B,T,H,D) and the (B,H,T,D) layout attention
 * kernels want (each head's rows contiguous). Used by every multi-head mixer.
 */
#ifndef SEQ_HEADS_H
#define SEQ_HEADS_H

// dst (B,H,T,D) = src (B,T,H,D) permuted
void heads_split(float *dst, const float *src, int B, int T, int H, int D);
// dst (B,T,H,D) = src (B,H,T,D) permuted (the inverse)
void heads_merge(float *dst, const float *src, int B, int T, int H, int D);

#endif
