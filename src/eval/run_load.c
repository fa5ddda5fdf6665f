#include "eval/run_load.h"

#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ckpt/ckptdir.h"
#include "eval/evaluate.h"
#include "ckpt/safetensors.h"

int run_load_model(Model *m, RunConfig *c, const char *run, const char *ckpt, int threads, Err *e) {
    char path[2048], latest[1200];
    snprintf(path, sizeof path, "%s/config.json", run);
    CfgOrigins *origins = NULL;
    if (run_config_load(c, path, NULL, 0, &origins, e) != 0) return -1;
    if (!ckpt) {
        int has = ckptdir_latest(run, latest, sizeof latest, e);
        if (has < 0) { config_origins_free(origins); return -1; }
        if (has == 0) { config_origins_free(origins); return err_set(e, "%s: no checkpoint yet (train it first)", run); }
        ckpt = latest;
    }
    // the vocabulary is recorded in the checkpoint's embedding; read it from the file's wte shape
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
    SafeTensorsFile f;
    if (safetensors_open(&f, path, e) != 0) { config_origins_free(origins); return -1; }
    const SafeTensorInfo *wte = safetensors_find(&f, "wte");
    int V = wte && wte->ndim == 2 ? (int)wte->shape[0] : 0;
    safetensors_close(&f);
    if (!V) { config_origins_free(origins); return err_set(e, "%s: no 'wte' tensor: not a seqtrain model", path); }
    int rc = model_build_uninit(m, &c->model, V, origins, e);  // every parameter comes from the checkpoint below
    config_origins_free(origins);
    if (rc != 0) return -1;
    if (safetensors_read_table(path, &m->pt, m->params, e) != 0) return -1;
    // a diverged run's weights: every number computed from them would be NaN; say so instead
    size_t at;
    int k = params_first_nonfinite(&m->pt, m->params, &at);
    if (k >= 0)
        return err_set(e, "%s: tensor '%s' holds a non-finite value (%g at element %zu): the run %s diverged, there is "
                       "nothing to evaluate", path, m->pt.t[k].name, (double)m->params[m->pt.t[k].offset + at], at, run);
#ifdef _OPENMP
    // a run trained with run.threads = 2 may be evaluated on a bigger machine: --threads wins over it
    if (threads > 0) omp_set_num_threads(threads);
    else if (c->run.threads > 0) omp_set_num_threads(c->run.threads);
#else
    (void)threads;
#endif
    return 0;
}
