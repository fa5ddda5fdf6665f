/*
 * seqeval --generate: text generation from a trained run (the option table, prompts, streaming output).
 * seqeval's main hands the whole command line here when it holds --generate.
 */
#ifndef SEQ_CLI_GENERATE_H
#define SEQ_CLI_GENERATE_H

// the exit status: 0, 1 after an error message, 2 for no --run
int generate_main(const char *prog, int argc, char **argv);

#endif
