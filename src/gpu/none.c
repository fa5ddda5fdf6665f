/*
 * The GPU backend of a build without CUDA (the plain `make`): every run.device cuda run is refused by
 * gpu_check_model / gpu_open, so no Gpu exists and the other calls cannot be reached; they stop the
 * program if a caller ever gets that wrong. `make CUDA=1` links the CUDA files of gpu/ instead of this file.
 */
#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>

static const char NO_CUDA_[] =
    "run.device cuda: this binary was built without the CUDA backend; build it with `make CUDA=1` (nvcc and "
    "cuBLAS; the tools land in build/cuda/bin/) or set run.device cpu";

int gpu_check_model(const Model *m, Err *e) {
    (void)m;
    return err_set(e, "%s", NO_CUDA_);
}

int gpu_open(Gpu **g, const Model *m, const Optim *o, const char *precision, Err *e) {
    (void)m, (void)o, (void)precision;
    *g = NULL;
    return err_set(e, "%s", NO_CUDA_);
}

static void unreachable_(const char *what) {
    fprintf(stderr, "seqtrain: internal error: %s called in a build without CUDA\n", what);
    abort();
}

void gpu_close(Gpu *g) {
    if (g) unreachable_("gpu_close");
}
const char *gpu_device_name(const Gpu *g) { (void)g; unreachable_("gpu_device_name"); return ""; }
size_t gpu_mem_used(const Gpu *g) { (void)g; unreachable_("gpu_mem_used"); return 0; }
void gpu_upload(Gpu *g, const float *p, const float *m, const float *v) { (void)g, (void)p, (void)m, (void)v; unreachable_("gpu_upload"); }
void gpu_download(Gpu *g, float *p, float *m, float *v) { (void)g, (void)p, (void)m, (void)v; unreachable_("gpu_download"); }
void gpu_download_grads(Gpu *g, float *grads) { (void)g, (void)grads; unreachable_("gpu_download_grads"); }
void gpu_zero_grad(Gpu *g) { (void)g; unreachable_("gpu_zero_grad"); }
int gpu_forward_backward(Gpu *g, const int *inputs, const int *targets, int B, int T, int n_norm, double *loss,
                         int *n_sup, Err *e) {
    (void)g, (void)inputs, (void)targets, (void)B, (void)T, (void)n_norm, (void)loss, (void)n_sup;
    unreachable_("gpu_forward_backward");
    return err_set(e, "%s", NO_CUDA_);
}
int gpu_forward(Gpu *g, const int *inputs, const int *targets, int B, int T, float *logits, double *loss, int *n_sup,
                Err *e) {
    (void)g, (void)inputs, (void)targets, (void)B, (void)T, (void)logits, (void)loss, (void)n_sup;
    unreachable_("gpu_forward");
    return err_set(e, "%s", NO_CUDA_);
}
int gpu_forward_eval(Gpu *g, const int *inputs, const int *targets, int B, int T, float *losses, int *argmax,
                     double *loss, int *n_sup, Err *e) {
    (void)g, (void)inputs, (void)targets, (void)B, (void)T, (void)losses, (void)argmax, (void)loss, (void)n_sup;
    unreachable_("gpu_forward_eval");
    return err_set(e, "%s", NO_CUDA_);
}
int gpu_decoder_open(Gpu *g, int B, int cap, int *limit, Err *e) {
    (void)g, (void)B, (void)cap, (void)limit, (void)e;
    unreachable_("gpu_decoder_open");
    return -1;
}
void gpu_decoder_reset(Gpu *g) { (void)g; unreachable_("gpu_decoder_reset"); }
int gpu_decoder_step(Gpu *g, const int *tokens, float *logits, Err *e) {
    (void)g, (void)tokens, (void)logits, (void)e;
    unreachable_("gpu_decoder_step");
    return -1;
}
void gpu_decoder_close(Gpu *g) { (void)g; unreachable_("gpu_decoder_close"); }
double gpu_clip_grads(Gpu *g, Optim *o) { (void)g, (void)o; unreachable_("gpu_clip_grads"); return 0; }
void gpu_optim_step(Gpu *g, Optim *o, float lr, float beta1) { (void)g, (void)o, (void)lr, (void)beta1; unreachable_("gpu_optim_step"); }
