// SentencePiece shim: the only C++ in the project, exposed through extern "C" (data/tokenizer.h).
// Exceptions and absl/util statuses stop here and become Err messages.
extern "C" {  // the C headers it needs have C linkage (they carry no extern "C" guards themselves)
#include "core/err.h"
#include "core/sha256.h"
}
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

struct Tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    uint8_t sha[32];
    int vocab;
};

extern "C" Tokenizer *tokenizer_load(const char *model_path, Err *e) {
    uint8_t sha[32];
    // hashing first also gives a clean "cannot open" error before SentencePiece sees the path
    if (sha256_file(model_path, sha, e) != 0) return nullptr;
    Tokenizer *t = new Tokenizer();
    auto st = t->sp.Load(model_path);
    if (!st.ok()) {
        // SentencePiece's own message names its source line, which helps nobody holding a wrong file
        err_set(e, "%s: not a SentencePiece model (it does not parse as one; give the .model that seqtok train "
                "wrote)", model_path);
        delete t;
        return nullptr;
    }
    memcpy(t->sha, sha, 32);
    t->vocab = t->sp.GetPieceSize();
    return t;
}

extern "C" void tokenizer_free(Tokenizer *t) { delete t; }
extern "C" int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab; }
extern "C" int tokenizer_eos_id(const Tokenizer *t) { return t->sp.eos_id(); }
extern "C" const uint8_t *tokenizer_sha256(const Tokenizer *t) { return t->sha; }

extern "C" int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n,
                                size_t *cap, Err *e) {
    std::vector<int> out;
    auto st = t->sp.Encode(absl::string_view(text, len), &out);
    if (!st.ok()) return err_set(e, "tokenizer: encode failed: %s", st.ToString().c_str());
    if (*n + out.size() > *cap) {
        size_t c = (*n + out.size()) * 2 + 16;
        *ids = (uint32_t *)xrealloc(*ids, c * sizeof(uint32_t));
        *cap = c;
    }
    for (size_t i = 0; i < out.size(); i++) (*ids)[*n + i] = (uint32_t)out[i];
    *n += out.size();
    return 0;
}

extern "C" int tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len,
                                Err *e) {
    std::vector<int> in(n);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t)t->vocab)
            return err_set(e, "tokenizer: id %u at position %zu is >= vocab size %d", ids[i], i, t->vocab);
        in[i] = (int)ids[i];
    }
    std::string s;
    auto st = t->sp.Decode(in, &s);
    if (!st.ok()) return err_set(e, "tokenizer: decode failed: %s", st.ToString().c_str());
    *text = (char *)xmalloc(s.size() + 1);
    memcpy(*text, s.data(), s.size());
    (*text)[s.size()] = '\0';
    *len = s.size();
    return 0;
}

namespace {
// feeds SentencePiece's trainer from the C line callback
class LineIterator : public sentencepiece::SentenceIterator {
  public:
    LineIterator(TokenizerLineFn fn, void *ctx) : fn_(fn), ctx_(ctx) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        const char *s = nullptr;
        size_t n = 0;
        int rc = fn_(ctx_, &s, &n, &err_);
        if (rc == 1) {
            value_.assign(s, n);
        } else {
            done_ = true;
            failed_ = rc < 0;
        }
    }
    const std::string &value() const override { return value_; }
    sentencepiece::util::Status status() const override {
        if (failed_) return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, err_.msg);
        return sentencepiece::util::Status();
    }
    bool failed() const { return failed_; }
    const Err &err() const { return err_; }

  private:
    TokenizerLineFn fn_;
    void *ctx_;
    std::string value_;
    bool done_ = false, failed_ = false;
    Err err_{};
};
}  // namespace

extern "C" int tokenizer_train(const TokenizerTrainOpts *o, TokenizerLineFn next, void *ctx, Err *e) {
    // Normalisation is the identity and extra whitespace is kept, so that decode(encode(line)) == line
    // byte for byte; with byte_fallback even characters outside the vocabulary round-trip.
    std::unordered_map<std::string, std::string> kw = {
        {"model_prefix", o->model_prefix},
        {"vocab_size", std::to_string(o->vocab_size)},
        {"model_type", o->model_type},
        {"character_coverage", std::to_string(o->character_coverage)},
        {"byte_fallback", o->byte_fallback ? "true" : "false"},
        {"num_threads", std::to_string(o->threads)},
        {"max_sentence_length", std::to_string(o->max_sentence_length)},
        {"input_sentence_size", std::to_string(o->input_sentence_size)},
        {"shuffle_input_sentence", "true"},
        {"normalization_rule_name", "identity"},
        {"remove_extra_whitespaces", "false"},
        {"hard_vocab_limit", "false"},
        {"minloglevel", "1"},
        {"unk_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"pad_id", "-1"},
    };
    // this SentencePiece version takes the seed of its sentence sampling through a global setter
    sentencepiece::SetRandomGeneratorSeed((unsigned)o->seed);
    LineIterator it(next, ctx);
    sentencepiece::util::Status st;
    try {
        st = sentencepiece::SentencePieceTrainer::Train(kw, &it);
    } catch (const std::exception &ex) {
        return err_set(e, "tokenizer training failed: %s", ex.what());
    }
    if (it.failed()) {
        if (e) *e = it.err();
        return -1;
    }
    if (!st.ok()) return err_set(e, "tokenizer training failed: %s", st.ToString().c_str());
    return 0;
}
