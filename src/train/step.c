#include "train/step.h"

#include <stdio.h>
#include <string.h>

#include "core/dist.h"

int step_check_device(const Model *m, const char *device, Err *e) {
    return strcmp(device, "cuda") ? 0 : gpu_check_model(m, e);
}

int step_open(Step *s, Model *m, Optim *o, const char *device, const char *precision, Err *e) {
    *s = (Step){.m = m, .o = o};
    if (strcmp(device, "cuda")) return 0;
    if (dist_size() > 1)
        return err_set(e, "run.device cuda: the GPU backend trains in one process; start it without mpirun "
                       "(several GPUs are not supported yet, docs/gpu.md)");
    return gpu_open(&s->gpu, m, o, precision, e);
}

void step_close(Step *s) {
    gpu_close(s->gpu);
    s->gpu = NULL;
}

const char *step_device_name(const Step *s) { return s->gpu ? gpu_device_name(s->gpu) : NULL; }

const char *step_log_fields(const Step *s, char *buf, size_t n) {
    if (s->gpu) snprintf(buf, n, ", \"gpu_mem_mib\": %.1f", gpu_mem_used(s->gpu) / 1048576.0);
    else if (n) buf[0] = '\0';
    return buf;
}

void step_zero_grad(Step *s) {
    if (s->gpu) gpu_zero_grad(s->gpu);
    else model_zero_grad(s->m);
}

int step_micro_batch(Step *s, const int *inputs, const int *targets, int B, int T, int n_norm, uint64_t noise_seed,
                     double *loss_sum, Err *e) {
    if (s->gpu) {
        double loss;
        int n_sup;
        if (gpu_forward_backward(s->gpu, inputs, targets, B, T, n_norm, &loss, &n_sup, e) != 0) return -1;
        *loss_sum += loss * n_sup;
        return 0;
    }
    s->m->noise_seed = noise_seed;
    if (model_forward_backward(s->m, inputs, targets, B, T, n_norm, e) != 0) return -1;
    *loss_sum += s->m->loss * s->m->n_supervised;
    return 0;
}

void step_reduce_grads(Step *s) {
    // the whole flat buffer, alignment gaps included (pt.numel, core/params.h): the parameter count
    // (model_num_params) is shorter by the gaps, and the tensors at the buffer's end would keep each rank's own
    // gradient; the gaps are zero on every rank, so their sums stay zero
    if (!s->gpu) dist_sum_f32(s->m->grads, s->m->pt.numel);
}

double step_clip_grads(Step *s) {
    return s->gpu ? gpu_clip_grads(s->gpu, s->o) : optim_clip_grads(s->o, s->m->grads);
}

void step_update(Step *s, float lr, float beta1) {
    if (s->gpu) gpu_optim_step(s->gpu, s->o, lr, beta1);
    else optim_step(s->o, s->m->params, s->m->grads, lr, beta1);
}

void step_sync_to_host(Step *s) {
    if (s->gpu) gpu_download(s->gpu, s->m->params, s->o->m, s->o->v);
}

void step_sync_from_host(Step *s) {
    if (s->gpu) gpu_upload(s->gpu, s->m->params, s->o->m, s->o->v);
}
