// The model's training step on the GPU (gpu/gpu.h): model/model.c's forward and backward for the parts the
// backend has kernels for, over device buffers of the host model's layout, and the optimizer's elementwise
// halves. Reads the host Model for everything that describes the network; never writes it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/common.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/activation.cuh"
#include "gpu/adamw.cuh"
#include "gpu/embedding.cuh"
#include "gpu/matmul.cuh"
#include "gpu/devbuf.h"
#include "gpu/norm.cuh"
#include "gpu/xent.cuh"

extern "C" {
#include "gpu/gpu.h"
#include "nn/xent.h"
}

static cublasHandle_t blas_ = NULL;
static GpuMath math_ = GPU_TF32;

cublasHandle_t gpu_blas(void) { return blas_; }
GpuMath gpu_math(void) { return math_; }
static GpuMath math_of_(const char *precision) {
    return !strcmp(precision, "tf32") ? GPU_TF32 : !strcmp(precision, "bf16") ? GPU_BF16 : GPU_FP32;
}
void gpu_devbuf_set_precision(const char *precision) { math_ = math_of_(precision); }

void gpu_fail_(const char *what, const char *detail, const char *file, int line) {
    fprintf(stderr, "seqtrain: CUDA error: %s failed: %s (%s:%d)\n", what, detail, file, line);
    exit(1);
}

struct Gpu {
    const Model *m;
    char name[400];
    float *params, *grads, *adam_m, *adam_v;  // (pt->numel,) each, the host table's layout
    Mixer *mix;                               // (L,) the host mixers' fields with device buffers
    const GpuMixerOps **mops;                 // (L,)
    // activations for the current (B,T), one allocation
    int B, T;
    float *arena;
    LayerActs *la;  // (L,) model.h's layout on the device; the buffers LAYER_ACTS_MATMUL marks (the matmuls' inputs
                    //   and outputs, as the Gpu's lnf, dfc, dact) hold bf16 under run.precision bf16
    float *res_out, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses, *mix_out, *dres, *dtmp, *dfc, *dact, *scratch;
    // the autoencoder head's decoder (model.c's dec_*): x (B,T,C), n1 (matmul input), f1, a1 (B,T,D1), n2 (matmul
    // input), f2, a2 (B,T,D2), the norms' statistics, and the backward's third buffer beside dres and dtmp
    float *ae_x, *ae_n1, *ae_n1_mean, *ae_n1_rstd, *ae_f1, *ae_a1, *ae_n2, *ae_n2_mean, *ae_n2_rstd, *ae_f2, *ae_a2,
        *ae_g;
    int *inputs, *targets, *emb_tok, *emb_offs, *emb_pos;  // (B*T,) each, emb_offs (B*T+1,)
    // host side of the embedding backward's bucket sort, and the losses
    int *h_count, *h_tok, *h_offs, *h_pos;
    float *h_losses;
    // optimizer: the chunks of optim/optim.c on the device
    int n_chunks;
    size_t *chunk_start;
    int *chunk_len, *chunk_tensor;
    double *chunk_sumsq;
    float *coef;  // (pt->n, OPTIM_COEF)
    size_t mem_base;  // the device's used bytes before the backend allocated anything (its context included)
    // recurrent decoding (gpu_decoder_*): dec_B sequences' states, layer l's (dec_B, state_size(cap)) at dec_off[l]
    float *dec_state;
    size_t *dec_off;
    int dec_B, dec_cap, dec_t, dec_limit;
};

// ----------------------------------------------------------------------------
// checks

int gpu_check_model(const Model *m, Err *e) {
    if (m->mc > 1)
        return err_set(e, "run.device cuda: model.mc_samples %d (KLA+) has no GPU kernels yet; set it to 1 or train "
                       "with run.device cpu", m->mc);
    for (int l = 0; l < m->L; l++) {
        const char *name = m->mspec[l].ops->name;
        const GpuMixerOps *g = gpu_mixer_lookup(name);
        if (!g) {
            char list[256];
            gpu_mixer_names(list, sizeof list);
            return err_set(e, "run.device cuda: layer %d: mixer \"%s\" has no GPU kernels yet (model.mixer.kind or "
                           "model.layers; the GPU trains: %s); train it with run.device cpu", l, name, list);
        }
        if (g->check(&m->mspec[l], l, e) != 0) return err_prefix(e, "run.device cuda: ");
    }
    return 0;
}

// ----------------------------------------------------------------------------
// memory

static int dev_alloc_(void *p, size_t bytes, const char *what, Err *e) {
    cudaError_t err = cudaMalloc((void **)p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear it: the run stops with this message, not a later check's
        return err_set(e, "run.device cuda: cannot allocate %.1f MiB of GPU memory for %s: %s", bytes / 1048576.0,
                       what, cudaGetErrorString(err));
    }
    return 0;
}

static void acts_free_(Gpu *g) {
    void *bufs[] = {g->arena, g->inputs, g->targets, g->emb_tok, g->emb_offs, g->emb_pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) CUDA_CHECK(cudaFree(bufs[i]));
    g->arena = NULL;
    g->inputs = g->targets = g->emb_tok = g->emb_offs = g->emb_pos = NULL;
    free(g->h_tok);
    free(g->h_offs);
    free(g->h_pos);
    free(g->h_losses);
    g->h_tok = g->h_offs = g->h_pos = NULL;
    g->h_losses = NULL;
    g->B = g->T = 0;
}

// every activation buffer for (B,T), as model.c's model_alloc_acts_ lays out the host's
static int acts_alloc_(Gpu *g, int B, int T, Err *e) {
    if (g->B == B && g->T == T) return 0;
    acts_free_(g);
    const Model *m = g->m;
    size_t BT = (size_t)B * T, C = m->C, H = m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    // the autoencoder's widths: the head reads HW = D2; dres, dtmp and ae_g hold the widest row (model.c's W)
    size_t HW = m->HW, D1 = m->D1, D2 = m->D2, W = C, ae = m->ae ? 1 : 0;
    if (ae) W = C > D1 ? (C > D2 ? C : D2) : (D1 > D2 ? D1 : D2);
    // two passes: count, then hand out
    size_t n = 0, scratch = 0, mm = math_ == GPU_BF16 ? 2 : 1;  // floats per element of a matmul input: 1/mm
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        float *base = pass ? g->arena : NULL;
#define TAKE_(ptr, count) do { if (pass) (ptr) = base + n; n += ((count) + 63) & ~(size_t)63; } while (0)
#define TAKE_MM_(ptr, count) TAKE_(ptr, ((count) + mm - 1) / mm)
        for (int l = 0; l < m->L; l++) {
            size_t count[LAYER_ACTS];
            model_layer_act_counts(m, l, B, T, count);
            for (int k = 0; k < LAYER_ACTS; k++) {
                if (!count[k]) g->la[l].buf[k] = NULL;
                else if (LAYER_ACTS_MATMUL[k]) TAKE_MM_(g->la[l].buf[k], count[k]);
                else TAKE_(g->la[l].buf[k], count[k]);
            }
            TAKE_(g->mix[l].acts, g->mops[l]->act_size(&m->mspec[l], B, T));
            size_t s = g->mops[l]->scratch_size(&m->mspec[l], B, T);
            if (s > scratch) scratch = s;
        }
        TAKE_(g->res_out, BT * C);
        TAKE_(g->ae_x, ae * BT * C);
        TAKE_MM_(g->ae_n1, ae * BT * C);
        TAKE_(g->ae_n1_mean, ae * BT);
        TAKE_(g->ae_n1_rstd, ae * BT);
        TAKE_(g->ae_f1, ae * BT * D1);
        TAKE_(g->ae_a1, ae * BT * D1);
        TAKE_MM_(g->ae_n2, ae * BT * D1);
        TAKE_(g->ae_n2_mean, ae * BT);
        TAKE_(g->ae_n2_rstd, ae * BT);
        TAKE_(g->ae_f2, ae * BT * D2);
        TAKE_(g->ae_a2, ae * BT * D2);
        TAKE_(g->ae_g, ae * BT * W);
        TAKE_MM_(g->lnf, BT * HW);
        TAKE_(g->lnf_mean, BT);
        TAKE_(g->lnf_rstd, BT);
        TAKE_(g->logits, BT * m->V);
        TAKE_(g->losses, BT);
        TAKE_(g->mix_out, BT * C);
        TAKE_(g->dres, BT * W);
        TAKE_(g->dtmp, BT * W);
        TAKE_MM_(g->dfc, BT * F);
        TAKE_MM_(g->dact, BT * H);
        TAKE_(g->scratch, scratch);
#undef TAKE_MM_
#undef TAKE_
        if (!pass) {
            char what[160];
            snprintf(what, sizeof what, "the activations of B %d x T %d (train.batch_size, train.seq_len)", B, T);
            if (dev_alloc_(&g->arena, n * sizeof(float), what, e) != 0) return -1;
        }
    }
    for (int l = 0; l < m->L; l++) {
        g->mix[l].scratch = g->scratch;
        g->mix[l].B = B;
        g->mix[l].T = T;
    }
    if (dev_alloc_(&g->inputs, BT * sizeof(int), "the batch", e) || dev_alloc_(&g->targets, BT * sizeof(int), "the batch", e) ||
        dev_alloc_(&g->emb_tok, BT * sizeof(int), "the batch", e) ||
        dev_alloc_(&g->emb_offs, (BT + 1) * sizeof(int), "the batch", e) ||
        dev_alloc_(&g->emb_pos, BT * sizeof(int), "the batch", e)) {
        acts_free_(g);
        return -1;
    }
    g->h_tok = (int *)xmalloc(BT * sizeof(int));
    g->h_offs = (int *)xmalloc((BT + 1) * sizeof(int));
    g->h_pos = (int *)xmalloc(BT * sizeof(int));
    g->h_losses = (float *)xmalloc(BT * sizeof(float));
    g->B = B;
    g->T = T;
    return 0;
}

// ----------------------------------------------------------------------------
// open, close, copies

int gpu_open(Gpu **out, const Model *m, const Optim *o, const char *precision, Err *e) {
    *out = NULL;
    if (strcmp(precision, "fp32") && strcmp(precision, "tf32") && strcmp(precision, "bf16"))
        return err_set(e, "run.precision \"%s\": the GPU takes fp32, tf32 or bf16", precision);
    if (gpu_check_model(m, e) != 0) return -1;
    int n_dev = 0;
    cudaError_t err = cudaGetDeviceCount(&n_dev);
    if (err != cudaSuccess || n_dev == 0) {
        cudaGetLastError();
        return err_set(e, "run.device cuda: no CUDA device found (%s); train with run.device cpu",
                       err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    Gpu *g = (Gpu *)xcalloc(1, sizeof(Gpu));
    g->m = m;
    CUDA_CHECK(cudaFree(0));  // creates the context, so that mem_base counts it and gpu_mem_used does not
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    g->mem_base = total_b - free_b;
    snprintf(g->name, sizeof g->name, "%.256s, cc %d.%d, %.1f GiB, %s matmuls", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0, precision);
    if (!blas_) CUBLAS_CHECK(cublasCreate(&blas_));
    // fp32: cuBLAS's default math never uses TF32; tf32: tensor cores with 10-bit-mantissa inputs
    CUBLAS_CHECK(cublasSetMathMode(blas_, !strcmp(precision, "tf32") ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    math_ = math_of_(precision);
    const ParamTable *pt = &m->pt;
    size_t bytes = pt->numel * sizeof(float);
    // o NULL (evaluation): no moments, no optimizer chunks
    if (dev_alloc_(&g->params, bytes, "the parameters", e) || dev_alloc_(&g->grads, bytes, "the gradients", e) ||
        (o && dev_alloc_(&g->adam_m, bytes, "AdamW's first moments", e)) ||
        (o && dev_alloc_(&g->adam_v, bytes, "AdamW's second moments", e))) {
        gpu_close(g);
        return -1;
    }
    CUDA_CHECK(cudaMemset(g->grads, 0, bytes));
    if (math_ == GPU_BF16 && gpu_bf16_shadow_init(g->params, pt->numel) != 0) {
        gpu_close(g);
        return err_set(e, "run.device cuda: cannot allocate %.1f MiB of GPU memory for the bf16 copy of the parameters",
                       pt->numel * 2 / 1048576.0);
    }
    gpu_upload(g, m->params, o ? o->m : NULL, o ? o->v : NULL);
    // the optimizer's chunks, with their lengths (a tensor's last chunk is short)
    g->n_chunks = o ? o->n_chunks : 0;
    int *len = (int *)xmalloc((g->n_chunks ? g->n_chunks : 1) * sizeof(int));
    for (int c = 0; c < g->n_chunks; c++) {
        const ParamTensor *t = &pt->t[o->chunk_tensor[c]];
        size_t end = t->offset + t->numel;
        len[c] = (int)(end - o->chunk_start[c] < OPTIM_NORM_CHUNK ? end - o->chunk_start[c] : OPTIM_NORM_CHUNK);
    }
    size_t nc = g->n_chunks ? g->n_chunks : 1;
    int rc = dev_alloc_(&g->chunk_start, nc * sizeof(size_t), "the optimizer's tables", e) ||
             dev_alloc_(&g->chunk_len, nc * sizeof(int), "the optimizer's tables", e) ||
             dev_alloc_(&g->chunk_tensor, nc * sizeof(int), "the optimizer's tables", e) ||
             dev_alloc_(&g->chunk_sumsq, nc * sizeof(double), "the optimizer's tables", e) ||
             dev_alloc_(&g->coef, (pt->n ? pt->n : 1) * OPTIM_COEF * sizeof(float), "the optimizer's tables", e);
    if (rc) {
        free(len);
        gpu_close(g);
        return -1;
    }
    if (o) {
        CUDA_CHECK(cudaMemcpy(g->chunk_start, o->chunk_start, o->n_chunks * sizeof(size_t), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(g->chunk_len, len, o->n_chunks * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(g->chunk_tensor, o->chunk_tensor, o->n_chunks * sizeof(int), cudaMemcpyHostToDevice));
    }
    free(len);
    // the layers: the host's Mixer fields, device buffers
    g->mix = (Mixer *)xcalloc(m->L ? m->L : 1, sizeof(Mixer));
    g->mops = (const GpuMixerOps **)xcalloc(m->L ? m->L : 1, sizeof(GpuMixerOps *));
    g->la = (LayerActs *)xcalloc(m->L ? m->L : 1, sizeof(LayerActs));
    for (int l = 0; l < m->L; l++) {
        g->mix[l] = m->mix[l];
        g->mix[l].params = g->params;
        g->mix[l].grads = g->grads;
        g->mix[l].acts = g->mix[l].scratch = NULL;
        g->mops[l] = gpu_mixer_lookup(m->mspec[l].ops->name);
    }
    g->h_count = (int *)xcalloc((size_t)m->V + 1, sizeof(int));
    *out = g;
    return 0;
}

void gpu_close(Gpu *g) {
    if (!g) return;
    gpu_prof_print();
    if (math_ == GPU_BF16) gpu_bf16_shadow_free();
    acts_free_(g);
    void *bufs[] = {g->params, g->grads, g->adam_m, g->adam_v, g->chunk_start, g->chunk_len, g->chunk_tensor,
                    g->chunk_sumsq, g->coef};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) CUDA_CHECK(cudaFree(bufs[i]));
    gpu_decoder_close(g);
    free(g->mix);
    free(g->mops);
    free(g->la);
    free(g->h_count);
    free(g);
}

const char *gpu_device_name(const Gpu *g) { return g->name; }

size_t gpu_mem_used(const Gpu *g) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b > g->mem_base ? total_b - free_b - g->mem_base : 0;
}

static void copy_(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (dst && src) CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void gpu_upload(Gpu *g, const float *params, const float *adam_m, const float *adam_v) {
    size_t bytes = g->m->pt.numel * sizeof(float);
    copy_(g->params, params, bytes, cudaMemcpyHostToDevice);
    if (params && math_ == GPU_BF16) gpu_bf16_shadow_refresh();
    copy_(g->adam_m, adam_m, bytes, cudaMemcpyHostToDevice);
    copy_(g->adam_v, adam_v, bytes, cudaMemcpyHostToDevice);
}

void gpu_download(Gpu *g, float *params, float *adam_m, float *adam_v) {
    size_t bytes = g->m->pt.numel * sizeof(float);
    copy_(params, g->params, bytes, cudaMemcpyDeviceToHost);
    copy_(adam_m, g->adam_m, bytes, cudaMemcpyDeviceToHost);
    copy_(adam_v, g->adam_v, bytes, cudaMemcpyDeviceToHost);
}

void gpu_download_grads(Gpu *g, float *grads) {
    copy_(grads, g->grads, g->m->pt.numel * sizeof(float), cudaMemcpyDeviceToHost);
}

void gpu_zero_grad(Gpu *g) { CUDA_CHECK(cudaMemset(g->grads, 0, g->m->pt.numel * sizeof(float))); }

// ----------------------------------------------------------------------------
// forward, backward

#define P_(k) ((k) >= 0 ? g->params + m->pt.t[k].offset : NULL)
#define G_(k) ((k) >= 0 ? g->grads + m->pt.t[k].offset : NULL)

// a matmul input or elementwise-read output of the model's (ln1, ln2, lnf, act, dfc; fc, dact): bf16 in
// run.precision bf16
static GpuAct mm_(float *p) { return gpu_act(p, math_ == GPU_BF16); }

// the model's norms over rows of W (d_model but in the autoencoder's decoder)
static void norm_fwd_(Gpu *g, float *out, float *mean, float *rstd, const float *inp, int kw, int kb, int N, int W) {
    const Model *m = g->m;
    GPU_TIMED("norm.forward", gpu_norm_forward(mm_(out), mean, rstd, inp, P_(kw), P_(kb), N, W, m->rms));
}

static void norm_bwd_(Gpu *g, float *dinp, const float *dout, const float *inp, const float *mean, const float *rstd,
                      int kw, int kb, int N, int W) {
    const Model *m = g->m;
    GPU_TIMED("norm.backward", gpu_norm_backward(dinp, G_(kw), G_(kb), dout, inp, P_(kw), mean, rstd, N, W, m->rms));
}

// ----------------------------------------------------------------------------
// the autoencoder head (model.head autoencoder; model.c's ae_forward_ and ae_backward_): code = res[b, T-1],
// x[b,t] = code + sincos(t), then norm1 -> fc1 -> GELU -> norm2 -> fc2 -> GELU, the final norm's input

// x (B,T,C) = res[b, T-1] + MAD's posemb_sincos_1d(t): [sin(t w_i) | cos(t w_i)], w_i = 10000^(-i/(C/2-1)), formed
// in double and rounded once as on the host (0 in an odd C's last column)
__global__ void ae_code_kernel(float *x, const float *res, int B, int T, int C) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)B * T * C) return;
    int i = (int)(e % C), t = (int)(e / C % T), b = (int)(e / C / T), half = C / 2;
    float pe = 0.0f;
    if (i < 2 * half) {
        int k = i < half ? i : i - half;
        double w = half > 1 ? exp(-log(10000.0) * k / (half - 1)) : 1.0;
        pe = (float)(i < half ? sin(t * w) : cos(t * w));
    }
    x[e] = res[((size_t)b * T + T - 1) * C + i] + pe;
}
// dres (B,T,C) WRITTEN: row (b, T-1) = sum over t of dx[b,t] (in order), every other row 0
__global__ void ae_code_backward_kernel(float *dres, const float *dx, int B, int T, int C) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)B * C) return;
    int i = (int)(e % C), b = (int)(e / C);
    float s = 0.0f;
    for (int t = 0; t < T; t++) {
        s += dx[((size_t)b * T + t) * C + i];
        if (t + 1 < T) dres[((size_t)b * T + t) * C + i] = 0.0f;
    }
    dres[((size_t)b * T + T - 1) * C + i] = s;
}

// one Linear + GELU of the decoder: pre (N,OC) = inp (N,IC) W^T, out (N,OC) = GELU(pre + b) (the bias added by the
// activation, as the MLP's)
static void ae_fc_forward_(Gpu *g, float *out, float *pre, float *inp, int kw, int kb, int N, int IC, int OC) {
    const Model *m = g->m;
    GPU_TIMED("ae.forward", {
        gpu_matmul_forward(gpu_f32(pre), mm_(inp), P_(kw), NULL, N, IC, OC);
        gpu_act_forward(gpu_f32(out), gpu_f32(pre), P_(kb), N, OC, MLP_GELU);
    });
}

static const float *ae_forward_(Gpu *g, int B, int T) {
    const Model *m = g->m;
    int C = m->C, D1 = m->D1, D2 = m->D2, BT = B * T;
    GPU_TIMED("ae.code", GPU_LAUNCH(ae_code_kernel, (size_t)BT * C, g->ae_x, g->res_out, B, T, C));
    norm_fwd_(g, g->ae_n1, g->ae_n1_mean, g->ae_n1_rstd, g->ae_x, m->k_dn1_w, m->k_dn1_b, BT, C);
    ae_fc_forward_(g, g->ae_a1, g->ae_f1, g->ae_n1, m->k_dfc1_w, m->k_dfc1_b, BT, C, D1);
    norm_fwd_(g, g->ae_n2, g->ae_n2_mean, g->ae_n2_rstd, g->ae_a1, m->k_dn2_w, m->k_dn2_b, BT, D1);
    ae_fc_forward_(g, g->ae_a2, g->ae_f2, g->ae_n2, m->k_dfc2_w, m->k_dfc2_b, BT, D1, D2);
    return g->ae_a2;
}

// one Linear + GELU of the decoder backwards: dinp (N,IC) WRITTEN from dout (N,OC), the gradient of its GELU's output,
// through the activation (into dpre, (N,OC)) and the Linear (kw, kb its weight and bias) whose input was inp
static void ae_fc_backward_(Gpu *g, float *dinp, float *dpre, const float *dout, const float *pre, float *inp, int kw,
                            int kb, int N, int IC, int OC) {
    const Model *m = g->m;
    GPU_TIMED("ae.backward", {
        gpu_act_backward(gpu_f32(dpre), gpu_f32(pre), P_(kb), gpu_f32(dout), N, OC, MLP_GELU);
        gpu_matmul_backward(gpu_f32(dinp), G_(kw), G_(kb), gpu_f32(dpre), mm_(inp), P_(kw), N, IC, OC, 0);
    });
}

// from dres = d(loss)/d(the decoder's output) (B,T,D2) to dres = d(loss)/d(res_out) (B,T,C); dtmp and ae_g scratch
static void ae_backward_(Gpu *g, int B, int T) {
    const Model *m = g->m;
    int C = m->C, D1 = m->D1, D2 = m->D2, BT = B * T;
    ae_fc_backward_(g, g->dtmp, g->ae_g, g->dres, g->ae_f2, g->ae_n2, m->k_dfc2_w, m->k_dfc2_b, BT, D1, D2);  // d n2
    GPU_TIMED("memset", CUDA_CHECK(cudaMemset(g->ae_g, 0, (size_t)BT * D1 * sizeof(float))));
    norm_bwd_(g, g->ae_g, g->dtmp, g->ae_a1, g->ae_n2_mean, g->ae_n2_rstd, m->k_dn2_w, m->k_dn2_b, BT, D1);  // d a1
    ae_fc_backward_(g, g->ae_g, g->dtmp, g->ae_g, g->ae_f1, g->ae_n1, m->k_dfc1_w, m->k_dfc1_b, BT, C, D1);  // d n1
    GPU_TIMED("memset", CUDA_CHECK(cudaMemset(g->dtmp, 0, (size_t)BT * C * sizeof(float))));
    norm_bwd_(g, g->dtmp, g->ae_g, g->ae_x, g->ae_n1_mean, g->ae_n1_rstd, m->k_dn1_w, m->k_dn1_b, BT, C);  // d x
    GPU_TIMED("ae.code", GPU_LAUNCH(ae_code_backward_kernel, (size_t)B * C, g->dres, g->dtmp, B, T, C));
}

// the batch onto the device, checked first as model.c checks it; the embedding backward's buckets: the
// positions of each distinct id in increasing order (a counting sort over the vocabulary)
static int batch_upload_(Gpu *g, const int *inputs, const int *targets, int B, int T, int *n_sup, Err *e) {
    const Model *m = g->m;
    int BT = B * T;
    if (model_check_batch(m, inputs, targets, BT, e) != 0) return -1;
    if (acts_alloc_(g, B, T, e) != 0) return -1;
    CUDA_CHECK(cudaMemcpy(g->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice));
    *n_sup = 0;
    if (targets) {
        CUDA_CHECK(cudaMemcpy(g->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice));
        for (int i = 0; i < BT; i++) *n_sup += targets[i] != XENT_IGNORE_INDEX;
    }
    return 0;
}

static int buckets_upload_(Gpu *g, const int *inputs, int BT) {
    int V = g->m->V, *cnt = g->h_count, n_tok = 0;
    memset(cnt, 0, ((size_t)V + 1) * sizeof(int));
    for (int i = 0; i < BT; i++) cnt[inputs[i]]++;
    g->h_offs[0] = 0;
    for (int v = 0; v < V; v++)
        if (cnt[v]) {
            g->h_tok[n_tok] = v;
            g->h_offs[n_tok + 1] = g->h_offs[n_tok] + cnt[v];
            cnt[v] = g->h_offs[n_tok];  // from here on: the next free slot of v's bucket
            n_tok++;
        }
    for (int i = 0; i < BT; i++) g->h_pos[cnt[inputs[i]]++] = i;
    CUDA_CHECK(cudaMemcpy(g->emb_tok, g->h_tok, n_tok * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g->emb_offs, g->h_offs, (n_tok + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g->emb_pos, g->h_pos, BT * sizeof(int), cudaMemcpyHostToDevice));
    return n_tok;
}

// model.c's model_forward_ (S = 1); grad: the logits become dlogits (n_norm), returned (bf16 in
// run.precision bf16)
static GpuAct forward_(Gpu *g, int B, int T, int has_targets, int n_norm, int grad) {
    const Model *m = g->m;
    int BT = B * T, C = m->C, H = m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    GPU_TIMED("embedding.forward", gpu_embedding_forward(m->L ? g->la[0].res : g->res_out, g->inputs, P_(m->k_wte), BT, C));
    for (int l = 0; l < m->L; l++) {
        LayerActs *a = &g->la[l];
        const LayerParams *lp = &m->lp[l];
        float *next = l + 1 < m->L ? g->la[l + 1].res : g->res_out;
        norm_fwd_(g, a->ln1, a->ln1_mean, a->ln1_rstd, a->res, lp->ln1_w, lp->ln1_b, BT, C);
        if (g->dec_state)  // decoding: T 1, each layer's step on its state
            g->mops[l]->step(&g->mix[l], g->dec_state + g->dec_off[l], g->mix_out, mm_(a->ln1), B, g->dec_t,
                             g->dec_cap);
        else
            g->mops[l]->forward(&g->mix[l], g->mix_out, mm_(a->ln1), B, T);
        if (!lp->has_mlp) {  // a fused block (x += mixer(norm(x))), or model.mlp.kind none
            GPU_TIMED("residual", gpu_residual(next, a->res, g->mix_out, NULL, (size_t)BT * C, C));
            continue;
        }
        GPU_TIMED("residual", gpu_residual(a->res_mid, a->res, g->mix_out, NULL, (size_t)BT * C, C));
        norm_fwd_(g, a->ln2, a->ln2_mean, a->ln2_rstd, a->res_mid, lp->ln2_w, lp->ln2_b, BT, C);
        // the fc bias is added by the activation, proj's by the residual add (no pass of their own)
        GPU_TIMED("mlp.fc.forward", gpu_matmul_forward(mm_(a->fc), mm_(a->ln2), P_(lp->fc_w), NULL, BT, C, F));
        GPU_TIMED("mlp.act.forward", gpu_act_forward(mm_(a->act), mm_(a->fc), P_(lp->fc_b), BT, H, m->mlp_kind));
        GPU_TIMED("mlp.proj.forward", gpu_matmul_forward(gpu_f32(g->mix_out), mm_(a->act), P_(lp->proj_w), NULL, BT, H, C));
        GPU_TIMED("residual", gpu_residual(next, a->res_mid, g->mix_out, P_(lp->proj_b), (size_t)BT * C, C));
    }
    const float *final = m->ae ? ae_forward_(g, B, T) : g->res_out;
    norm_fwd_(g, g->lnf, g->lnf_mean, g->lnf_rstd, final, m->k_lnf_w, m->k_lnf_b, BT, m->HW);
    GPU_TIMED("head.forward", gpu_matmul_forward(gpu_f32(g->logits), mm_(g->lnf), m->tie ? P_(m->k_wte) : P_(m->k_head_w),
                                                 P_(m->k_head_b), BT, m->HW, m->V));
    GpuAct dlogits = gpu_f32(g->logits);
    if (has_targets)
        GPU_TIMED("crossentropy", dlogits = gpu_crossentropy(g->losses, g->logits, g->targets, BT, m->V, n_norm, grad,
                                                             grad && math_ == GPU_BF16));
    return dlogits;
}

// model.c's model_backward from the forward's dlogits
static void backward_(Gpu *g, GpuAct dlogits, int B, int T, int n_tok) {
    const Model *m = g->m;
    int BT = B * T, C = m->C, H = m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    size_t BTC = (size_t)BT * C;
    const float *head = m->tie ? P_(m->k_wte) : P_(m->k_head_w);
    int HW = m->HW;
    GPU_TIMED("head.backward", gpu_matmul_backward(gpu_f32(g->dtmp), m->tie ? G_(m->k_wte) : G_(m->k_head_w), G_(m->k_head_b),
                                                   dlogits, mm_(g->lnf), head, BT, HW, m->V, 0));
    GPU_TIMED("memset", CUDA_CHECK(cudaMemset(g->dres, 0, (size_t)BT * HW * sizeof(float))));
    norm_bwd_(g, g->dres, g->dtmp, m->ae ? g->ae_a2 : g->res_out, g->lnf_mean, g->lnf_rstd, m->k_lnf_w, m->k_lnf_b, BT,
              HW);
    if (m->ae) ae_backward_(g, B, T);
    for (int l = m->L - 1; l >= 0; l--) {
        LayerActs *a = &g->la[l];
        const LayerParams *lp = &m->lp[l];
        if (lp->has_mlp) {
            // next = res_mid + proj(act(fc(norm(res_mid))))
            GPU_TIMED("mlp.proj.backward", gpu_matmul_backward(mm_(g->dact), G_(lp->proj_w), G_(lp->proj_b), gpu_f32(g->dres), mm_(a->act),
                                                               P_(lp->proj_w), BT, H, C, 0));
            GPU_TIMED("mlp.act.backward", gpu_act_backward(mm_(g->dfc), mm_(a->fc), P_(lp->fc_b), mm_(g->dact), BT, H, m->mlp_kind));
            GPU_TIMED("mlp.fc.backward", gpu_matmul_backward(gpu_f32(g->dtmp), G_(lp->fc_w), G_(lp->fc_b), mm_(g->dfc), mm_(a->ln2),
                                                             P_(lp->fc_w), BT, C, F, 0));
            norm_bwd_(g, g->dres, g->dtmp, a->res_mid, a->ln2_mean, a->ln2_rstd, lp->ln2_w, lp->ln2_b, BT, C);
        }
        // res_mid = res + mixer(norm(res))
        GPU_TIMED("memset", CUDA_CHECK(cudaMemset(g->dtmp, 0, BTC * sizeof(float))));
        g->mops[l]->backward(&g->mix[l], g->dtmp, g->dres, mm_(a->ln1), B, T);
        norm_bwd_(g, g->dres, g->dtmp, a->res, a->ln1_mean, a->ln1_rstd, lp->ln1_w, lp->ln1_b, BT, C);
    }
    GPU_TIMED("embedding.backward",
              gpu_embedding_backward(G_(m->k_wte), g->dres, g->emb_tok, g->emb_offs, g->emb_pos, n_tok, C));
}

// the mean over supervised positions of the per-position losses, summed in double in position order as
// crossentropy_forward does
static double mean_loss_(Gpu *g, int BT, int n_sup) {
    CUDA_CHECK(cudaMemcpy(g->h_losses, g->losses, BT * sizeof(float), cudaMemcpyDeviceToHost));
    gpu_prof_flush();  // the copy waited for the step's kernels
    double s = 0;
    for (int i = 0; i < BT; i++) s += g->h_losses[i];
    return n_sup ? s / n_sup : 0.0;
}

int gpu_forward_backward(Gpu *g, const int *inputs, const int *targets, int B, int T, int n_norm, double *loss,
                         int *n_sup, Err *e) {
    if (batch_upload_(g, inputs, targets, B, T, n_sup, e) != 0) return -1;
    int n_tok = buckets_upload_(g, inputs, B * T);
    GpuAct dlogits = forward_(g, B, T, 1, n_norm, 1);
    backward_(g, dlogits, B, T, n_tok);
    *loss = mean_loss_(g, B * T, *n_sup);
    return 0;
}

int gpu_forward(Gpu *g, const int *inputs, const int *targets, int B, int T, float *logits, double *loss, int *n_sup,
                Err *e) {
    if (batch_upload_(g, inputs, targets, B, T, n_sup, e) != 0) return -1;
    forward_(g, B, T, targets != NULL, 0, 0);
    if (logits)
        CUDA_CHECK(cudaMemcpy(logits, g->logits, (size_t)B * T * g->m->V * sizeof(float), cudaMemcpyDeviceToHost));
    if (loss) *loss = targets ? mean_loss_(g, B * T, *n_sup) : 0.0;
    return 0;
}

// ----------------------------------------------------------------------------
// optimizer: the host computes every scalar (optim/optim.c), the device does the elementwise work

double gpu_clip_grads(Gpu *g, Optim *o) {
    GPU_TIMED("optim.sumsq", gpu_chunk_sumsq(g->chunk_sumsq, g->grads, g->chunk_start, g->chunk_len, g->n_chunks));
    CUDA_CHECK(cudaMemcpy(o->chunk_sumsq, g->chunk_sumsq, g->n_chunks * sizeof(double), cudaMemcpyDeviceToHost));
    double norm = optim_norms_from_chunks(o);
    if (!isfinite(norm)) return norm;
    if (optim_clip_scales(o)) {
        CUDA_CHECK(cudaMemcpy(g->coef, o->tensor_coef, (size_t)o->pt->n * OPTIM_COEF * sizeof(float),
                              cudaMemcpyHostToDevice));
        GPU_TIMED("optim.clip", gpu_chunk_scale(g->grads, g->chunk_start, g->chunk_len, g->chunk_tensor, g->coef,
                                                g->n_chunks));
    }
    return norm;
}

void gpu_optim_step(Gpu *g, Optim *o, float lr, float beta1) {
    optim_step_coefs(o, lr, beta1);
    CUDA_CHECK(cudaMemcpy(g->coef, o->tensor_coef, (size_t)o->pt->n * OPTIM_COEF * sizeof(float),
                          cudaMemcpyHostToDevice));
    GPU_TIMED("optim.adamw", gpu_adamw(g->params, g->adam_m, g->adam_v, g->grads, g->chunk_start, g->chunk_len,
                                       g->chunk_tensor, g->coef, g->n_chunks));
    if (math_ == GPU_BF16) GPU_TIMED("optim.bf16_copy", gpu_bf16_shadow_refresh());
}

// ----------------------------------------------------------------------------
// evaluation

int gpu_forward_eval(Gpu *g, const int *inputs, const int *targets, int B, int T, float *losses, int *argmax,
                     double *loss, int *n_sup, Err *e) {
    int sup;
    if (batch_upload_(g, inputs, targets, B, T, &sup, e) != 0) return -1;
    int BT = B * T;
    forward_(g, B, T, targets != NULL, 0, 0);
    if (argmax) {
        // into the embedding backward's position list: (B*T,) ints that an evaluation forward does not use
        GPU_TIMED("eval.argmax", gpu_argmax_rows(g->emb_pos, g->logits, BT, g->m->V));
        CUDA_CHECK(cudaMemcpy(argmax, g->emb_pos, BT * sizeof(int), cudaMemcpyDeviceToHost));
    }
    double mean = targets ? mean_loss_(g, BT, sup) : 0.0;  // the losses land in g->h_losses
    if (!targets) memset(g->h_losses, 0, BT * sizeof(float));
    if (losses) memcpy(losses, g->h_losses, BT * sizeof(float));
    if (loss) *loss = mean;
    if (n_sup) *n_sup = sup;
    return 0;
}

// ----------------------------------------------------------------------------
// recurrent decoding: model_decoder_step's network with each mixer's step on the device

int gpu_decoder_open(Gpu *g, int B, int cap, int *limit, Err *e) {
    const Model *m = g->m;
    gpu_decoder_close(g);
    for (int l = 0; l < m->L; l++)
        if (!g->mops[l]->step)
            return err_set(e, "layer %d (%s) has no GPU decoding yet; decode with --device cpu", l,
                           m->mspec[l].ops->name);
    int lim;
    size_t *off = model_decoder_layout(m, B, cap, &lim, e);
    if (!off) return -1;
    char what[160];
    snprintf(what, sizeof what, "the decoding states of %d sequences", B);
    if (dev_alloc_(&g->dec_state, off[m->L] * sizeof(float), what, e) != 0) {
        free(off);
        return -1;
    }
    g->dec_off = off;
    g->dec_B = B, g->dec_cap = cap, g->dec_limit = lim;
    *limit = lim;
    gpu_decoder_reset(g);
    return 0;
}

void gpu_decoder_reset(Gpu *g) {
    const Model *m = g->m;
    float *h = (float *)xmalloc(g->dec_off[m->L] * sizeof(float));
    for (int l = 0; l < m->L; l++) m->mspec[l].ops->state_init(&m->mix[l], h + g->dec_off[l], g->dec_B, g->dec_cap);
    CUDA_CHECK(cudaMemcpy(g->dec_state, h, g->dec_off[m->L] * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    g->dec_t = 0;
}

int gpu_decoder_step(Gpu *g, const int *tokens, float *logits, Err *e) {
    int B = g->dec_B, sup;
    if (g->dec_t >= g->dec_limit)
        return err_set(e, "the decoder is full: its attention caches hold %d positions (reset it and feed the last "
                       "tokens again to go on)", g->dec_cap);
    if (batch_upload_(g, tokens, NULL, B, 1, &sup, e) != 0) return -1;
    forward_(g, B, 1, 0, 0, 0);
    CUDA_CHECK(cudaMemcpy(logits, g->logits, (size_t)B * g->m->V * sizeof(float), cudaMemcpyDeviceToHost));
    g->dec_t++;
    return 0;
}

void gpu_decoder_close(Gpu *g) {
    if (g->dec_state) CUDA_CHECK(cudaFree(g->dec_state));
    free(g->dec_off);
    g->dec_state = NULL;
    g->dec_off = NULL;
    g->dec_B = g->dec_cap = g->dec_t = g->dec_limit = 0;
}
