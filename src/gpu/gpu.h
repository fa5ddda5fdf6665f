/*
 * The GPU backend (CUDA): the training step of a Model on one NVIDIA GPU, behind the same Model and Optim
 * the CPU uses. docs/gpu.md describes the design; in short:
 *
 *   - The host Model stays the description of the network (spec, ParamTable, layer kinds) and the place
 *     checkpoints are written from. The device holds params, grads and Adam's m, v as flat fp32 buffers of
 *     the SAME layout (pt->numel floats, every tensor at its table offset), so moving state between the
 *     devices is one copy of each buffer and checkpoints are byte-for-byte the CPU's format.
 *   - Optimizer groups, clipping and the update's per-tensor scalars are the CPU's code (optim/optim.c's
 *     host halves: optim_norms_from_chunks, optim_clip_scales, optim_step_coefs); only the elementwise
 *     parts and the per-chunk sums of squares run on the GPU.
 *   - A mixer trains on the GPU when it has a GpuMixerOps (gpu/mixer_gpu.cuh, listed in gpu/registry.cu); its
 *     forward/backward get the same Mixer struct as on the CPU with device pointers in it.
 *   - Anything without kernels (another mixer, a position scheme, the autoencoder head, KLA+ samples) is
 *     refused by gpu_check_model, naming the key and value, before anything is allocated.
 *
 * Built by `make CUDA=1` (the CUDA files of gpu/, nvcc and cuBLAS). The plain build links gpu/none.c instead, whose
 * gpu_open says the binary has no CUDA backend; nothing else there can be reached.
 *
 * Errors of the CUDA runtime inside a step (a kernel fault, a lost device) print the call, file and line
 * and exit with status 1, as llm.c does: there is no state left to save that the last checkpoint lacks.
 */
#ifndef SEQ_GPU_H
#define SEQ_GPU_H

#include "core/err.h"
#include "model/model.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Gpu Gpu;

// can m train on the GPU backend? 0, or -1 with e naming the first thing it cannot (key and value); needs no
// device, so --check can say it. Always -1 in a build without CUDA.
int gpu_check_model(const Model *m, Err *e);
// a backend for m (borrowed; it must outlive *g) and o's table: checks the model, opens the first CUDA device,
// allocates params, grads, m, v on it and uploads m's parameters and o's moments. precision: "fp32" | "tf32"
// ("bf16" is refused). o NULL: a backend for evaluation (seqeval), params and grads only, no optimizer state
// (gpu_clip_grads and gpu_optim_step must not be called). -1 with e set (no device, out of memory, a model it
// cannot train)
int gpu_open(Gpu **g, const Model *m, const Optim *o, const char *precision, Err *e);
void gpu_close(Gpu *g);
// one line naming the device ("NVIDIA H100 80GB HBM3, cc 9.0, 79.1 GiB") for the start-up line
const char *gpu_device_name(const Gpu *g);
// the device memory in use now beyond what was in use when gpu_open began (CUDA's context excluded): the
// backend's buffers, cuBLAS's workspace and anything else this process allocated since. Other processes on
// the same GPU count too, so on a shared GPU it is an upper bound.
size_t gpu_mem_used(const Gpu *g);

// state between the devices; any pointer may be NULL (skipped). Each is (pt->numel,) in the table's layout
void gpu_upload(Gpu *g, const float *params, const float *adam_m, const float *adam_v);
void gpu_download(Gpu *g, float *params, float *adam_m, float *adam_v);
void gpu_download_grads(Gpu *g, float *grads);

void gpu_zero_grad(Gpu *g);
// model_forward_backward on the GPU: inputs, targets (B,T) on the host; grads += the micro-batch's gradient
// of the mean loss over n_norm supervised positions. *loss = the micro-batch's mean loss, *n_sup its
// supervised positions. -1 with e set for a bad token id or target (checked on the host first).
int gpu_forward_backward(Gpu *g, const int *inputs, const int *targets, int B, int T, int n_norm, double *loss,
                         int *n_sup, Err *e);
// model_forward on the GPU: logits (B,T,V) copied to the host when not NULL; with targets, *loss and *n_sup
int gpu_forward(Gpu *g, const int *inputs, const int *targets, int B, int T, float *logits, double *loss,
                int *n_sup, Err *e);

// model_forward on the GPU for evaluation (eval/forward.h), copying back nothing of the (B,T,V) logits: inputs,
// targets (B,T) on the host (targets may be NULL). losses (B*T,): the per-position losses (0 where the target is
// ignored), *loss their mean over the *n_sup supervised positions, as gpu_forward's; argmax (B*T,): each
// position's predicted token, model_argmax's rule (the first index of the largest logit; 0 when the first logit
// is NaN). losses, argmax, loss may be NULL. The activations are sized for (B,T) as in training: a call with
// another shape frees them and allocates the new ones (the peak is the larger, never the sum).
int gpu_forward_eval(Gpu *g, const int *inputs, const int *targets, int B, int T, float *losses, int *argmax,
                     double *loss, int *n_sup, Err *e);

// Recurrent decoding on the GPU, model_decoder_* (model/model.h) with every layer's state on the device in the
// host decoder's layout and each mixer's step there (eval/generate.h drives either). One decoder per backend.
// open: B sequences, attention caches of cap positions; *limit as ModelDecoder.limit (INT_MAX: never full). -1 with
// e set when a layer's mixer has no GPU step (naming the layer) or the memory runs out. The states start empty.
int gpu_decoder_open(Gpu *g, int B, int cap, int *limit, Err *e);
// every state back to the empty prefix (the host mixers' state_init, uploaded); the next token is position 0
void gpu_decoder_reset(Gpu *g);
// tokens (B,) of the next position: logits (B,V) WRITTEN to host memory. -1 with e set for a bad id or a full decoder
int gpu_decoder_step(Gpu *g, const int *tokens, float *logits, Err *e);
void gpu_decoder_close(Gpu *g);  // frees the states (gpu_close does it too)

// optim_clip_grads on the device's gradients (o's norms and scales, the same order and rule); returns the
// global norm before clipping (non-finite: gradients untouched)
double gpu_clip_grads(Gpu *g, Optim *o);
// optim_step on the device's buffers (o->t advances as on the CPU)
void gpu_optim_step(Gpu *g, Optim *o, float lr, float beta1);

#ifdef __cplusplus
}
#endif

#endif
