/*
 * Where evaluation's forward passes run: the host model, or the GPU backend (gpu/gpu.h) holding the same
 * network (run.device cuda). The evaluation loops (eval/evaluate.c: perplexity by context, validation, task
 * accuracy; eval/zeroshot.c) and seqeval --probe see only this: a batch in, per-position losses and predicted
 * tokens out, in host memory whichever device computed them, so each loop exists once.
 *
 * The GPU side copies back B*T losses (and B*T predictions when asked), never the (B,T,V) logits: the argmax
 * runs on the device. The host side reads its model's buffers in place.
 */
#ifndef SEQ_FORWARD_H
#define SEQ_FORWARD_H

#include "core/err.h"
#include "gpu/gpu.h"
#include "model/model.h"

typedef struct Forward {
    Model *m;       // the network; a host pass runs on it (its noise_seed keys KLA+ samples, as before)
    Gpu *gpu;       // NULL: the host model; else the backend with m's parameters
    int own_gpu;    // forward_open opened gpu (forward_close closes it); else borrowed (the trainer's)
    // the last forward_run: per-position losses (B*T,) of its batch (0 where the target is ignored), their mean
    // over the supervised positions and how many there were
    const float *losses;
    double loss;
    int n_supervised;
    // the GPU's results copied to the host, (cap,) each
    float *h_losses;
    int *h_pred;
    size_t cap;
} Forward;

// over the host model (gpu NULL) or a backend the caller holds for m (borrowed: it must outlive f)
void forward_init(Forward *f, Model *m, Gpu *gpu);
// device "cpu": the host model; "cuda": a GPU backend opened for evaluation only (no optimizer state) with m's
// parameters uploaded, its matmuls in precision (run.precision). -1 with e set (no CUDA in this build, no
// device, a model the GPU has no kernels for)
int forward_open(Forward *f, Model *m, const char *device, const char *precision, Err *e);
// frees the host copies, closes a backend forward_open opened
void forward_close(Forward *f);
// "cpu", or the GPU's name (gpu_device_name)
const char *forward_device(const Forward *f);

// inputs, targets (B,T) (targets may be NULL: no losses) -> f->losses, f->loss, f->n_supervised; predict: also
// each position's predicted token for forward_argmax. -1 with e set for a bad token id or target
int forward_run(Forward *f, const int *inputs, const int *targets, int B, int T, int predict, Err *e);
// the predicted token of position i (< B*T) of the last forward_run (on the GPU it must have had predict)
int forward_argmax(const Forward *f, size_t i);

// seqeval --probe: the batch's logits (B,T,V), its mean *loss over the supervised positions and every
// parameter's gradient of that loss, grads (m->pt.numel,) in the table's layout; the model's own gradients are
// overwritten (host) or the backend's (GPU)
int forward_probe(Forward *f, const int *inputs, const int *targets, int B, int T, float *logits, float *grads,
                  double *loss, Err *e);

#endif
