/* zorch_generate: text generation from a C host, without writing Lua. A
   generator loads a Hugging Face model folder (Llama, Mistral, Qwen2, GPT-2)
   into an embedded zorch VM and runs zorch.generate there (docs/generation.md):
   ragged prompts in one batch, the paged KV cache, the same tokens as Lua.
   Token ids are the tokenizer's, 0-based. Errors: NULL or a status, with
   zorch_last_error() set; nothing aborts. */
#ifndef ZORCH_GENERATE_H
#define ZORCH_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "zorch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zorch_generator_host zorch_generator_host;

/* Every field 0 is its default. */
typedef struct {
  int max_new_tokens;           /* 0: 16 */
  int do_sample;                /* 0: greedy */
  double temperature;           /* 0: 1 (greedy is do_sample = 0) */
  int top_k;                    /* 0: off */
  double top_p;                 /* 0: 1 (off) */
  double min_p;                 /* 0: off */
  double repetition_penalty;    /* 0: 1 (off) */
  double presence_penalty, frequency_penalty;
  int has_seed;                 /* 1: seed below, a generator per request */
  int64_t seed;
  const int64_t *stop_token_ids; /* n_stop_token_ids ids ending a request (eos) */
  int n_stop_token_ids;
  size_t kv_budget_bytes;       /* the KV cache's pool; 0: 256 MiB */
  int block_size;               /* tokens a block; 0: 16 */
} zorch_generate_opts;

typedef enum { ZORCH_FINISH_LENGTH = 0, ZORCH_FINISH_STOP = 1, ZORCH_FINISH_REFUSED = 2 } zorch_finish_reason;

typedef struct {
  int64_t *tokens; /* n_tokens generated ids (a stop id included) */
  int n_tokens;
  zorch_finish_reason finish;
} zorch_generation;

/* A generator of the model in folder dir (config.json and safetensors);
   NULL on failure. */
ZORCH_API zorch_generator_host *zorch_generate_load(const char *dir);
ZORCH_API void zorch_generate_free(zorch_generator_host *g);
/* Generates for n prompts (prompts[i]: lens[i] ids) into out[n] (the caller's
   array; free the tokens with zorch_generation_free). opts may be NULL. */
ZORCH_API zorch_status zorch_generate(zorch_generator_host *g, int n, const int64_t *const *prompts, const int *lens,
                                      const zorch_generate_opts *opts, zorch_generation *out);
ZORCH_API void zorch_generation_free(int n, zorch_generation *out);

#ifdef __cplusplus
}
#endif
#endif
