#include "eval/forward.h"

#include <stdlib.h>
#include <string.h>

void forward_init(Forward *f, Model *m, Gpu *gpu) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->gpu = gpu;
}

int forward_open(Forward *f, Model *m, const char *device, const char *precision, Err *e) {
    forward_init(f, m, NULL);
    if (strcmp(device, "cuda") != 0) return 0;
    if (gpu_open(&f->gpu, m, NULL, precision, e) != 0) return -1;
    f->own_gpu = 1;
    return 0;
}

void forward_close(Forward *f) {
    if (f->own_gpu) gpu_close(f->gpu);
    free(f->h_losses);
    free(f->h_pred);
    memset(f, 0, sizeof *f);
}

const char *forward_device(const Forward *f) { return f->gpu ? gpu_device_name(f->gpu) : "cpu"; }

int forward_run(Forward *f, const int *inputs, const int *targets, int B, int T, int predict, Err *e) {
    if (!f->gpu) {
        int rc = model_forward(f->m, inputs, targets, B, T, e);
        f->losses = f->m->losses;
        f->loss = f->m->loss;
        f->n_supervised = f->m->n_supervised;
        return rc;
    }
    size_t BT = (size_t)B * T;
    if (BT > f->cap) {
        f->h_losses = xrealloc(f->h_losses, BT * sizeof(float));
        f->h_pred = xrealloc(f->h_pred, BT * sizeof(int));
        f->cap = BT;
    }
    f->losses = f->h_losses;
    return gpu_forward_eval(f->gpu, inputs, targets, B, T, f->h_losses, predict ? f->h_pred : NULL, &f->loss,
                            &f->n_supervised, e);
}

int forward_argmax(const Forward *f, size_t i) { return f->gpu ? f->h_pred[i] : model_argmax(f->m, i); }

int forward_probe(Forward *f, const int *inputs, const int *targets, int B, int T, float *logits, float *grads,
                  double *loss, Err *e) {
    Model *m = f->m;
    size_t nl = (size_t)B * T * m->V;
    if (!f->gpu) {
        if (model_forward(m, inputs, targets, B, T, e) != 0) return -1;
        memcpy(logits, m->logits, nl * sizeof(float));  // backward turns the logits buffer into dlogits
        model_zero_grad(m);
        model_backward(m, m->n_supervised);
        memcpy(grads, m->grads, m->pt.numel * sizeof(float));
        *loss = m->loss;
        return 0;
    }
    // the GPU's training step turns its logits into dlogits too: a forward for the logits, then the step
    int n_sup, n2;
    double l2;
    if (gpu_forward(f->gpu, inputs, targets, B, T, logits, loss, &n_sup, e) != 0) return -1;
    gpu_zero_grad(f->gpu);
    if (gpu_forward_backward(f->gpu, inputs, targets, B, T, n_sup, &l2, &n2, e) != 0) return -1;
    gpu_download_grads(f->gpu, grads);
    return 0;
}
