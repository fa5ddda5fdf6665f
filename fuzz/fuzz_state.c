// libFuzzer harness: state.json of a checkpoint (ckpt/ckpt_state.h), parsed and validated from memory.
#include "fuzz_common.h"
#include "ckpt/ckpt_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    CkptState s;
    Err e;
    if (ckpt_state_parse(&s, text, "state.json", &e) == 0) {
        if (s.step < 0 || s.step > s.total_steps || s.optim_t != s.step || s.threads < 1) abort();  // the contract
        ckpt_state_free(&s);
    }
    free(text);
    return 0;
}
