/*
 * The zero-shot evaluation sets of data/eval/ (data/eval/README.md: provenance and licences) read into
 * items of (context, continuation) pairs, in the prompt formats of EleutherAI's lm-evaluation-harness.
 *
 * The files are packaged by llm-foundry (jsonl: query/choices/gold, context_options/continuation/gold,
 * context/continuation) and klosax (HellaSwag as text); each task's format turns the packaged fields back
 * into the harness's prompt (docs/zeroshot.md lists them), e.g. ARC: "Question: ...?\nAnswer:" + " choice".
 * Every continuation starts with the space that separates it from its context, as the harness's
 * target_delimiter does, so a tokenizer sees the word boundary in the continuation.
 *
 * Three task shapes:
 *   multiple choice  one context, one continuation per choice (the choices)
 *   partial          one context per choice, one shared continuation (WinoGrande, WSC: the option fills
 *                    the blank in the context, the rest of the sentence is scored after each)
 *   cloze            one context, one continuation, no choices (LAMBADA: the last word)
 */
#ifndef SEQ_EVALSETS_H
#define SEQ_EVALSETS_H

#include <stddef.h>
#include "core/err.h"

#define EVAL_CHOICES_MAX 8
#define EVAL_TASKS_MAX 16

typedef struct EvalTask {
    const char *name;     // "hellaswag": the name on the command line
    const char *file;     // under the eval data folder: "hellaswag_val.txt.zst"
    const char *column;   // the paper's Table 4 column head: "HellaS."
    int format;           // how the packaged fields become prompts (evalsets.c)
    int cloze;            // 1: LAMBADA (last-word accuracy and perplexity instead of a choice)
    int table_norm;       // 1: Table 4 reports acc_norm for this task, 0: acc
    int in_paper;         // one of the eight tasks of the KLA paper's Table 4
} EvalTask;

typedef struct EvalItem {
    int n_choices;                       // 1 for a cloze item
    int gold;                            // index of the right choice (0 for a cloze item)
    char *ctx[EVAL_CHOICES_MAX];         // (n_choices,) the context of each choice (equal strings unless partial)
    char *cont[EVAL_CHOICES_MAX];        // (n_choices,) the continuation scored after it, leading space included
    size_t norm_bytes[EVAL_CHOICES_MAX]; // UTF-8 bytes of the choice text (no delimiter space): acc_norm's divisor
} EvalItem;

typedef struct EvalSet {
    const EvalTask *task;
    EvalItem *items;
    long n;               // items read
    long n_file;          // items in the file (n < n_file under a limit)
} EvalSet;

// every task, in the order of the paper's Table 4, then the extra ones
const EvalTask *evalset_tasks(int *n);
// the task of that name, or NULL
const EvalTask *evalset_find(const char *name);
// "lambada,piqa" / "all" (every task) / "paper" (Table 4's eight) into out (no duplicates, in the order of
// evalset_tasks); an unknown name is an error with a did-you-mean and the list of names. Returns the count or -1.
int evalset_parse_list(const char *s, const EvalTask **out, int max, Err *e);
// read dir/<task file>: the first `limit` items (0 = all). A malformed line is an error naming file and line.
int evalset_load(EvalSet *s, const EvalTask *t, const char *dir, long limit, Err *e);
void evalset_free(EvalSet *s);

#endif
