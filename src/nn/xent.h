/*
 * Softmax cross-entropy over a vocabulary of V logits per row, with an ignore index.
 *
 * Rows (N = B*T positions) whose target is XENT_IGNORE_INDEX (-100, PyTorch's default) are not
 * supervised: their loss is 0 and their logit gradient is 0. The mean loss is taken over the
 * supervised rows only, so L = sum_{supervised n} -log softmax(logits_n)[target_n] / n_supervised.
 *
 * A target outside [0,V) that is not -100 is an error, never an out-of-bounds read:
 * crossentropy_check_targets() reports the first one, crossentropy_forward() returns -1 and writes
 * nothing, and both backward forms treat such a row as ignored.
 *
 * The forward caches two floats per row instead of the (N,V) probabilities: the row's max logit and
 * log(sum(exp(logit - max))); backward recomputes softmax = exp((logit - max) - logsum). Keeping the
 * two apart (rather than one float lse = max + logsum) matters for large logits: at |lse| ~ 1e4 a
 * float lse is only good to ~1e-3, which would put a 1e-3 relative error into every probability,
 * while logit - max is exact for the logits that carry probability mass. Two backward forms:
 *   crossentropy_backward          dlogits += ..., dlogits a separate (N,V) buffer (llm.c convention)
 *   crossentropy_backward_inplace  overwrites the logits buffer with dlogits (=, not +=), which saves
 *                                  the (N,V) gradient buffer, the largest activation of a small LM
 * and crossentropy_forward_backward, both at once, row by row (one pass over the (N,V) buffer).
 */
#ifndef SEQ_NN_XENT_H
#define SEQ_NN_XENT_H

#define XENT_IGNORE_INDEX (-100)

// index of the first target that is neither in [0,V) nor XENT_IGNORE_INDEX, or -1 if there is none
int crossentropy_check_targets(const int *targets, int N, int V);

// Returns the number of supervised rows (0 when every target is ignored; then *mean_loss = 0), or -1
// when some target is invalid (then nothing else is written and *mean_loss = NAN).
// losses (N,): per-row loss, 0 on ignored rows; stats (N,2): per row [max logit, log sum exp(logit -
// max)] for the backward, 0 on ignored rows; mean_loss: the mean over supervised rows, summed in double
// in row order.
int crossentropy_forward(float *losses, float *stats, double *mean_loss,
                         const float *logits, const int *targets,
                         int N, int V);

// dlogits += (softmax(logits) - onehot(target)) / n_norm on supervised rows. n_norm is the count the
// mean divides by: normally crossentropy_forward's return value; with gradient accumulation over
// micro-batches, the total over all of them. n_norm <= 0 adds nothing.
void crossentropy_backward(float *dlogits,
                           const float *logits, const float *stats, const int *targets,
                           int n_norm, int N, int V);

// the same gradient written over the logits buffer itself: logits (N,V) holds the forward's logits on
// entry and dlogits on return (ignored rows become 0; every row becomes 0 when n_norm <= 0)
void crossentropy_backward_inplace(float *logits,
                                   const float *stats, const int *targets,
                                   int n_norm, int N, int V);

// crossentropy_forward and then crossentropy_backward_inplace in one pass over the rows (training, when
// n_norm is known before the forward): logits (N,V) holds the logits on entry and dlogits on return;
// losses, stats, mean_loss and the return value as crossentropy_forward's (on -1, logits are untouched).
// The same bits as the two calls.
int crossentropy_forward_backward(float *losses, float *stats, double *mean_loss, float *logits,
                                  const int *targets, int n_norm, int N, int V);

#endif
