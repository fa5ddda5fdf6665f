/*
 * One training step on either device, so that the trainer's loop (train/trainer.c) and its checkpoints
 * (train/trainer_ckpt.c) exist once: the loop zeroes the gradients, runs the step's micro-batches, reduces,
 * clips and updates through these calls and never asks which device holds the state.
 *
 *   cpu   the host Model and Optim are the state; the gradients are summed over MPI ranks (core/dist.h)
 *   cuda  the GPU backend (gpu/gpu.h) holds params, grads and Adam's moments in the host table's layout; the
 *         host copies are brought up to date only for a checkpoint (step_sync_to_host), and a resumed state
 *         goes back with step_sync_from_host. The GPU trains in one process.
 *
 * Both devices share the optimizer's host logic (optim/optim.h: groups, clip scales, the update's scalars),
 * so a step's arithmetic outside the kernels is one definition.
 */
#ifndef SEQ_STEP_H
#define SEQ_STEP_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "gpu/gpu.h"
#include "model/model.h"
#include "optim/optim.h"

typedef struct Step {
    Model *m;    // the network's description on every device, and its state on the CPU
    Optim *o;    // the optimizer's host logic (and its moments on the CPU)
    Gpu *gpu;    // run.device cuda: the backend holding the state; NULL on the CPU
} Step;

// can m train on device ("cpu" | "cuda") in this build? 0, or -1 with e naming the key and value that the
// device cannot take; needs no GPU (seqtrain --check says it)
int step_check_device(const Model *m, const char *device, Err *e);
// a step over m and o (borrowed: both must outlive s) on device ("cpu" | "cuda") with run.precision precision
// (the GPU's matmuls; the CPU computes in fp32 whatever it says). The GPU refuses several MPI ranks. -1 with e set
int step_open(Step *s, Model *m, Optim *o, const char *device, const char *precision, Err *e);
void step_close(Step *s);
// the device's one-line description for the start-up line, or NULL on the CPU (its kernel set is printed there)
const char *step_device_name(const Step *s);
// ", \"name\": value" fields of the device for a log line (GPU memory in use), "" on the CPU; buf (n,)
const char *step_log_fields(const Step *s, char *buf, size_t n);

void step_zero_grad(Step *s);
// forward + backward of one micro-batch, inputs, targets (B,T) on the host: grads += its gradient of the step's
// mean loss over n_norm supervised positions (the whole step's count), *loss_sum += its summed loss.
// noise_seed keys KLA+ samples (the host's model.mc_samples; the GPU refuses that model). -1 with e set for a bad
// token id or target
int step_micro_batch(Step *s, const int *inputs, const int *targets, int B, int T, int n_norm, uint64_t noise_seed,
                     double *loss_sum, Err *e);
// the gradients summed over the processes of the run (MPI ranks, in rank order; one process: nothing)
void step_reduce_grads(Step *s);
// optim_clip_grads on the device's gradients; returns the global norm before clipping (not finite: untouched)
double step_clip_grads(Step *s);
// optim_step on the device's state: lr, beta1 of this update (the schedule's)
void step_update(Step *s, float lr, float beta1);

// the device's params and moments into m->params, o->m, o->v (a checkpoint is written from them)
void step_sync_to_host(Step *s);
// m->params, o->m, o->v (just read from a checkpoint) onto the device
void step_sync_from_host(Step *s);

#endif
