// libFuzzer harness: the zero-shot set reader (data/evalsets.h) on arbitrary files. The first byte picks the
// task (so its format: jsonl of query/choices, context_options, context/continuation, or HellaSwag's text),
// the second a limit on the items read (0 = all); the rest is the set file, plain or zstd (the reader
// sniffs the magic). A set that loads must hold what the scorer relies on: 1 to 8 choices (1 for LAMBADA),
// a gold index among them, and readable strings for every context and continuation.
#include "fuzz_common.h"
#include "data/evalsets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int n_tasks;
    const EvalTask *tasks = evalset_tasks(&n_tasks);
    const EvalTask *t = &tasks[data[0] % n_tasks];
    long limit = data[1] % 4;
    char path[256];
    fuzz_write(t->file, data + 2, size - 2, path, sizeof path);
    EvalSet s;
    Err e;
    if (evalset_load(&s, t, fuzz_dir(), limit, &e) != 0) return 0;
    if (s.n < 1 || s.n_file < s.n || (limit && s.n > limit)) abort();
    size_t sum = 0;
    for (long i = 0; i < s.n; i++) {
        const EvalItem *it = &s.items[i];
        if (it->n_choices < 1 || it->n_choices > EVAL_CHOICES_MAX || it->gold < 0 || it->gold >= it->n_choices) abort();
        if (t->cloze != (it->n_choices == 1)) abort();
        for (int c = 0; c < it->n_choices; c++) sum += strlen(it->ctx[c]) + strlen(it->cont[c]) + it->norm_bytes[c];
    }
    evalset_free(&s);
    (void)sum;
    return 0;
}
