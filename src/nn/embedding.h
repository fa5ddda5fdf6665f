/*
 * Token embedding lookup: out[n,:] = wte[ids[n],:] for N = B*T positions, and its backward, which
 * adds each position's gradient row into the row of its token. The backward is deterministic and
 * independent of the OpenMP thread count: threads own disjoint column ranges of dwte, and positions
 * that share a token id accumulate into it in position order.
 *
 * The ops trust ids to lie in [0,V); embedding_check_ids() validates a batch where ids come from
 * outside (data files), so that a bad id is reported instead of reading out of bounds.
 */
#ifndef SEQ_NN_EMBEDDING_H
#define SEQ_NN_EMBEDDING_H

// index of the first id outside [0,V), or -1 if there is none
int embedding_check_ids(const int *ids, int N, int V);

void embedding_forward(float *out, const int *ids, const float *wte, int N, int C);
void embedding_backward(float *dwte, const float *dout, const int *ids, int N, int C);

#endif
