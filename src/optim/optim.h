/*
 * AdamW with parameter groups, global and per-group gradient-norm clipping.
 *
 * Groups. A group selects tensors of the ParamTable by fnmatch globs on their names ("*" also matches
 * dots, so "blocks.*.mixer.mu*" works) and overrides any of lr, β1, β2, eps, weight decay, and adds a
 * local gradient-norm clip. The first group (in config order) with a matching pattern owns a tensor;
 * tensors no group matches use the global settings. optim_init resolves this once into per-tensor
 * tables so the update is a flat loop. A pattern that matches no tensor, or a group left owning no
 * tensor because earlier groups took all its matches, is an error (a typo would otherwise silently
 * train with the wrong settings).
 *
 * Inheritance (NaN = "not set"):
 *   lr            the group's own *peak* lr. The schedule scales it by the same factor as the global lr:
 *                 group lr at update s = group.lr * lr_s / cfg.lr, with lr_s the global lr of that
 *                 update (e.g. the RFA paper's SDE parameters at 5e-4 while the model uses another lr).
 *                 Unset: group lr = lr_mult * lr_s. Setting both lr and lr_mult != 1 is an error.
 *   beta1         unset: the β1 passed to optim_step (the global β1, or the schedule's cycled β1)
 *   beta2, eps    unset: the global value
 *   weight_decay  set: applies to every tensor of the group, whatever its decay flag;
 *                 unset (and for ungrouped tensors): the global wd if the tensor's decay flag is set,
 *                 0 otherwise (the flag is off for 1-D tensors, norms and embeddings)
 *   clip          local max grad norm of the group's tensors, 0 = off (not inherited)
 *
 * Update (PyTorch's torch.optim.AdamW order; t = 1-based update count, bias corrections with the β1
 * of this update):
 *   p <- p * (1 - lr*wd)                                  decoupled weight decay, on the old p
 *   m <- β1 m + (1-β1) g ;  v <- β2 v + (1-β2) g^2
 *   p <- p - lr/(1-β1^t) * m / (sqrt(v)/sqrt(1-β2^t) + eps)
 * Per-update scalars are computed in double, the elementwise part in float.
 *
 * Clipping (optim_clip_grads), in this order, on the gradients as they are after accumulation:
 *   1. norms of the raw gradients: every group's norm and the global norm (all tensors), in double
 *   2. local clips: a group whose norm exceeds its clip is scaled by clip/norm
 *   3. global clip: the global norm after step 2 (computed from the per-group sums, no second pass)
 *      is compared with grad_clip and everything is scaled by grad_clip/norm when it is larger
 *   both scales are folded into one multiply per element. Scaling by max/norm (no epsilon, as llm.c)
 *   lands exactly on the max norm up to float rounding. A non-finite norm leaves the gradients
 *   untouched and is returned so the trainer can skip the update.
 * Norms are deterministic and independent of the thread count: sums of squares are taken in fixed
 * chunks of OPTIM_NORM_CHUNK floats, each summed sequentially in double, then added in a fixed order.
 *
 * Gradient accumulation is the trainer's: every micro-batch's backward divides by the supervised-token
 * count of the whole step, so the summed gradients are already the step's mean when clipping starts.
 *
 * State for checkpoints: m, v (pt->numel floats each, same layout as the parameters) and t (updates
 * done). Writing those three and restoring them into a freshly initialised Optim with the same
 * ParamTable and config resumes bit-exactly.
 */
#ifndef SEQ_OPTIM_H
#define SEQ_OPTIM_H

#include <stddef.h>
#include "core/err.h"
#include "core/params.h"

#define OPTIM_GROUP_PATTERNS 8   // patterns per group; unused entries are NULL
#define OPTIM_NORM_CHUNK 4096    // floats per partial sum of squares (fixed, so norms ignore thread count)
#define OPTIM_COEF 6             // scratch scalars per tensor and update (OPTIM_COEF_* below)

// per-tensor scalars of one update, in tensor_coef[k*OPTIM_COEF + ...] (optim_step_coefs); the clip scale of
// optim_clip_scales sits in slot 0 until then
enum { COEF_DECAY_MUL, COEF_BETA1, COEF_BETA2, COEF_STEP_SIZE, COEF_INV_SQRT_BC2, COEF_EPS };

typedef struct OptimGroup {
    const char *patterns[OPTIM_GROUP_PATTERNS];  // fnmatch globs on tensor names, NULL-terminated
    float lr_mult;        // 1 by default
    float lr;             // absolute peak lr of the group, NaN = lr_mult x global
    float beta1, beta2, eps, weight_decay;  // NaN = inherit (see above)
    float clip;           // local grad-norm clip, 0 = off
} OptimGroup;

typedef struct OptimConfig {
    float lr;             // global peak lr (the schedule's peak); groups' absolute lr are relative to it
    float beta1, beta2, eps, weight_decay;
    float grad_clip;      // global max grad norm, 0 = off
    const OptimGroup *groups;  // borrowed during optim_init only (patterns are not kept)
    int n_groups;
} OptimConfig;

// settings of one group after inheritance; index n_groups is the implicit group of unmatched tensors
typedef struct OptimGroupRule {
    float lr_mult;        // used when lr_abs is NaN
    float lr_abs;         // absolute peak lr or NaN
    float beta1;          // NaN = the β1 of the update
    float beta2, eps;
    float clip;           // 0 = off
    int n_tensors;        // how many tensors it owns
} OptimGroupRule;

typedef struct Optim {
    const ParamTable *pt; // borrowed; must outlive the optimizer and not change
    OptimConfig cfg;      // copy (groups pointer cleared after init)
    int n_groups;
    OptimGroupRule *rules;   // (n_groups+1,)
    int *tensor_group;       // (pt->n,) owning group, n_groups = ungrouped
    float *tensor_wd;        // (pt->n,) resolved weight decay
    float *m, *v;            // (pt->numel,) Adam moments, zero-initialised
    long t;                  // updates done; the next update uses t+1 for bias correction
    // norms of the last optim_grad_norm/optim_clip_grads, before any clipping
    double grad_norm;        // global
    double grad_norm_clipped;  // global after the local clips (what the global clip compared)
    double *group_norm;      // (n_groups+1,)
    // scratch for deterministic norms
    double *chunk_sumsq;     // (n_chunks,)
    double *tensor_sumsq;    // (pt->n,)
    float *tensor_coef;      // (pt->n, OPTIM_COEF) per-update scalars of each tensor
    int *chunk_tensor;       // (n_chunks,) tensor of each chunk
    size_t *chunk_start;     // (n_chunks,) offset (floats) of each chunk in the flat buffer
    int n_chunks;
} Optim;

// a group with nothing set: lr_mult 1, every override NaN, clip 0; then set patterns and overrides
OptimGroup optim_group_default(void);
// validate cfg, resolve groups against pt, allocate zeroed m, v; -1 with a message on bad settings
int optim_init(Optim *o, const ParamTable *pt, const OptimConfig *cfg, Err *e);
void optim_free(Optim *o);
// zero m, v and t (a fresh start with the same groups)
void optim_reset(Optim *o);

// fill o->group_norm, o->grad_norm (and grad_norm_clipped = grad_norm); returns the global L2 norm of
// grads (pt->numel,) over all tensors (alignment gaps between tensors are not read)
double optim_grad_norm(Optim *o, const float *grads);
// norms, then local clips, then the global clip (order above); returns the global norm before clipping
double optim_clip_grads(Optim *o, float *grads);
// one AdamW update of params (pt->numel,) from grads (pt->numel,): lr = global lr of this update
// (e.g. schedule_lr), beta1 = global β1 of this update (e.g. schedule_beta1(.., cfg.beta1))
void optim_step(Optim *o, float *params, const float *grads, float lr, float beta1);

// The host halves of the three calls above, for a caller that keeps the buffers elsewhere (the GPU backend,
// gpu/gpu.h): it fills o->chunk_sumsq itself (the sum of squares of each OPTIM_NORM_CHUNK chunk, chunk c
// starting at o->chunk_start[c]) and does the elementwise parts with the scalars these leave in
// o->tensor_coef, so both devices share one definition of groups, clipping and the update's scalars.
// from o->chunk_sumsq: the group norms and the global norm, as optim_grad_norm (returns the global norm)
double optim_norms_from_chunks(Optim *o);
// after the norms: each tensor's combined clip scale into tensor_coef[k*OPTIM_COEF]; 1 when some scale != 1
int optim_clip_scales(Optim *o);
// t += 1 and each tensor's update scalars into tensor_coef[k*OPTIM_COEF + COEF_*] (lr, beta1 as optim_step)
void optim_step_coefs(Optim *o, float lr, float beta1);

#endif
