// SentencePiece shim: the only C++ in the project, exposed through extern "C" (data/tokenizer.h).
// Exceptions and absl/util statuses stop here and become Err messages.
extern "C" {  // the C headers it needs have C linkage (they carry no extern "C" guards themselves)
#include "core/err.h"
#include "core/sha256.h"
}
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

struct Tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    // the same model without the dummy prefix (the "\u2581" SentencePiece puts before a text's first word),
    // for the pieces of a long line that do not start a word; nodummy_ok = 0 when it did not load
    sentencepiece::SentencePieceProcessor nodummy;
    int nodummy_ok;
    int space_nodummy;  // a piece cut before a space: 1 = encode it with nodummy, 0 = with sp (probed at load)
    uint8_t sha[32];
    int vocab;
};

// Long lines are encoded in pieces of at most this many bytes: SentencePiece's time and memory grow faster
// than linearly in one string's length, so a line of many megabytes would take minutes and gigabytes whole
// (docs/results/speed_rounds.md, "Measurements moved from code comments").
#define TOKENIZER_PIECE_MAX 65536

static int encode_(const sentencepiece::SentencePieceProcessor &sp, const char *text, size_t len,
                   std::vector<int> *out, Err *e) {
    std::vector<int> part;
    auto st = sp.Encode(absl::string_view(text, len), &part);
    if (!st.ok()) return err_set(e, "tokenizer: encode failed: %s", st.ToString().c_str());
    out->insert(out->end(), part.begin(), part.end());
    return 0;
}

// the processor without the dummy prefix: the serialized model with a NormalizerSpec (ModelProto field 3)
// holding add_dummy_prefix = false (its field 3) appended, which protobuf merges over the model's own
static void load_nodummy_(Tokenizer *t) {
    std::string proto = t->sp.serialized_model_proto();
    proto.append("\x1a\x02\x18\x00", 4);
    t->nodummy_ok = t->nodummy.LoadFromSerializedProto(proto).ok();
    t->space_nodummy = 0;
    if (!t->nodummy_ok) return;
    // which processor continues a line cut before a space, so that the pieces' ids equal the whole line's:
    // sp when the model drops leading spaces (remove_extra_whitespaces, the default), else nodummy
    static const char *probes[] = {"hello world, it is a test", "a b", "x  y z"};
    int sp_ok = 1, nd_ok = 1;
    for (const char *p : probes) {
        const char *cut = strchr(p, ' ');
        std::vector<int> whole, a, b;
        Err e;
        if (encode_(t->sp, p, strlen(p), &whole, &e) || encode_(t->sp, p, (size_t)(cut - p), &a, &e)) return;
        std::vector<int> with_sp = a, with_nd = a;
        if (encode_(t->sp, cut, strlen(cut), &with_sp, &e) || encode_(t->nodummy, cut, strlen(cut), &with_nd, &e))
            return;
        sp_ok &= with_sp == whole;
        nd_ok &= with_nd == whole;
    }
    t->space_nodummy = !sp_ok && nd_ok;
}

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
    load_nodummy_(t);
    return t;
}

extern "C" void tokenizer_free(Tokenizer *t) { delete t; }
extern "C" int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab; }
extern "C" int tokenizer_eos_id(const Tokenizer *t) { return t->sp.eos_id(); }
extern "C" const uint8_t *tokenizer_sha256(const Tokenizer *t) { return t->sha; }

// out appended to the caller's growing array
static void append_ids_(const std::vector<int> &out, uint32_t **ids, size_t *n, size_t *cap) {
    if (*n + out.size() > *cap) {
        size_t c = (*n + out.size()) * 2 + 16;
        *ids = (uint32_t *)xrealloc(*ids, c * sizeof(uint32_t));
        *cap = c;
    }
    for (size_t i = 0; i < out.size(); i++) (*ids)[*n + i] = (uint32_t)out[i];
    *n += out.size();
}

extern "C" int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n,
                                size_t *cap, Err *e) {
    std::vector<int> out;
    // a long line in pieces of at most TOKENIZER_PIECE_MAX bytes, each cut before a run of spaces in the
    // window's second half, so that each piece starts a word and the ids are those of the whole line (BPE
    // and unigram never join pieces across a space); with no space there, at a UTF-8 character boundary,
    // where the ids may differ from an uncut encoding but still decode to the same text (the piece is encoded
    // without the dummy prefix)
    size_t at = 0;
    int cont = 0;  // 0: the piece starts the line; 1: after a cut before a space; 2: after any other cut
    while (len - at > TOKENIZER_PIECE_MAX) {
        size_t lo = at + TOKENIZER_PIECE_MAX / 2, cut = 0;
        for (size_t j = at + TOKENIZER_PIECE_MAX; j > lo && !cut; j--)
            if (text[j] == ' ' && text[j - 1] != ' ') cut = j;
        int next = 1;
        if (!cut) {
            next = 2;
            cut = at + TOKENIZER_PIECE_MAX;
            while (cut > lo && ((unsigned char)text[cut] & 0xC0) == 0x80) cut--;
        }
        const auto &sp = (cont == 2 || (cont == 1 && t->space_nodummy)) && t->nodummy_ok ? t->nodummy : t->sp;
        if (encode_(sp, text + at, cut - at, &out, e)) return -1;
        at = cut;
        cont = next;
    }
    const auto &sp = (cont == 2 || (cont == 1 && t->space_nodummy)) && t->nodummy_ok ? t->nodummy : t->sp;
    if (encode_(sp, text + at, len - at, &out, e)) return -1;
    append_ids_(out, ids, n, cap);
    return 0;
}

extern "C" int tokenizer_encode_continuation(const Tokenizer *t, const char *text, size_t len, uint32_t **ids,
                                             size_t *n, size_t *cap, Err *e) {
    std::vector<int> out;
    // continuations are a few words; the long-line cutting of tokenizer_encode is not needed
    if (encode_(t->nodummy_ok ? t->nodummy : t->sp, text, len, &out, e)) return -1;
    append_ids_(out, ids, n, cap);
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
            lines_++;
            text_lines_ += n > 0;
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
    unsigned long long lines() const { return lines_; }
    unsigned long long text_lines() const { return text_lines_; }

  private:
    TokenizerLineFn fn_;
    void *ctx_;
    std::string value_;
    bool done_ = false, failed_ = false;
    unsigned long long lines_ = 0, text_lines_ = 0;
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
    if (st.ok()) return 0;
    // SentencePiece's own words name its source lines and its flags (--character_coverage); the two failures
    // a user meets are said in seqtok's
    if (it.text_lines() == 0)
        return err_set(e, "tokenizer training: the input holds no text (%llu line%s, none with a character): a "
                       "tokenizer learns its pieces from text; give files that hold some", it.lines(),
                       it.lines() == 1 ? "" : "s");
    const char *small = strstr(st.ToString().c_str(), "Vocabulary size is smaller than required_chars.");
    int vocab = 0, need = 0;
    if (small && sscanf(small, "Vocabulary size is smaller than required_chars. %d vs %d", &vocab, &need) == 2)
        return err_set(e, "tokenizer training: a vocabulary of %d pieces cannot hold the %d characters (and special "
                       "pieces) the input needs at this character coverage; raise --vocab-size above %d, or lower "
                       "--character-coverage so rare characters fall back to bytes", vocab, need, need);
    return err_set(e, "tokenizer training failed: %s", st.ToString().c_str());
}
