/* zorch_tokenizer.h: text to token ids and back (docs/tokenizers.md).

   Two kinds of files load:
     a Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2,
       Llama 3, Qwen2: the ByteLevel pre-tokenizer, alone or after a Split
       with one of the known patterns) or SentencePiece-style (Llama 2,
       Mistral: "▁" for spaces, <0xNN> byte fallback), with its added tokens
       and a TemplateProcessing post-processor;
     a tiktoken rank file (base64 token, a space, its rank, per line), with
       the cl100k_base pattern and the special tokens given to the loader.
   Anything else in a file (another model, normalizer, pre-tokenizer,
   pattern, decoder) is refused when it loads, with the file and the key
   named; nothing is half-loaded.

   Ids are the file's own, 0-based as in Hugging Face's tokenizers and
   tiktoken (not zorch's 1-based tensor indices).
   Errors: every function that can fail returns a zorch_status and sets the
   message zorch_last_error() gives; none aborts or exits.
   Threads: a tokenizer keeps a cache of words it has encoded, so one
   tokenizer is used by one thread at a time (load one per thread to encode
   in parallel). */
#ifndef ZORCH_TOKENIZER_H
#define ZORCH_TOKENIZER_H
#include "zorch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zorch_tokenizer zorch_tokenizer;

/* A special token of a tiktoken file: its text and id. */
typedef struct {
  const char *text; /* UTF-8, NUL-terminated */
  int32_t id;
} zorch_special_token;

/* Which pattern splits the text of a tiktoken file into words. */
typedef enum {
  ZORCH_PATTERN_CL100K = 0, /* tiktoken's cl100k_base */
  ZORCH_PATTERN_GPT2 = 1,   /* GPT-2's (r50k_base, p50k_base) */
} zorch_tokenizer_pattern;

/* Loads a tokenizer.json; *out set on success (free with zorch_tokenizer_free). */
ZORCH_API zorch_status zorch_tokenizer_load_json(const char *path, zorch_tokenizer **out);
/* Loads a .tiktoken rank file with a pattern and n special tokens (NULL, 0:
   none; cl100k_base's are <|endoftext|> 100257, <|fim_prefix|> 100258,
   <|fim_middle|> 100259, <|fim_suffix|> 100260, <|endofprompt|> 100276). */
ZORCH_API zorch_status zorch_tokenizer_load_tiktoken(const char *path, zorch_tokenizer_pattern pattern,
                                                     const zorch_special_token *specials, size_t n, zorch_tokenizer **out);
/* Loads either, by the content: a file starting with '{' is a tokenizer.json,
   else a tiktoken file with the cl100k pattern and cl100k_base's specials. */
ZORCH_API zorch_status zorch_tokenizer_load(const char *path, zorch_tokenizer **out);
ZORCH_API void zorch_tokenizer_free(zorch_tokenizer *t); /* NULL: nothing */

/* Which special tokens in the text are read as themselves. */
typedef enum {
  ZORCH_SPECIAL_DEFAULT = 0, /* the file's way: tokenizer.json all (HF's encode), tiktoken none */
  ZORCH_SPECIAL_ALL = 1,     /* every special token */
  ZORCH_SPECIAL_NONE = 2,    /* none: their text is encoded as text (tiktoken's encode_ordinary) */
  ZORCH_SPECIAL_LIST = 3,    /* only those in allowed (tiktoken's allowed_special) */
} zorch_special_mode;

typedef struct {
  bool add_special;        /* add the post-processor's tokens (HF's add_special_tokens; e.g. Llama's BOS) */
  zorch_special_mode special;
  const char *const *allowed; /* ZORCH_SPECIAL_LIST: n_allowed NUL-terminated texts */
  size_t n_allowed;
} zorch_encode_opts;

/* Encodes len bytes of UTF-8 text (invalid bytes are encoded as bytes); NULL
   opts: add_special true, ZORCH_SPECIAL_DEFAULT. *ids (free() it; NULL when
   *n is 0) holds *n ids. Added tokens that are not special (HF's
   special: false) are always read as themselves. */
ZORCH_API zorch_status zorch_tokenizer_encode(zorch_tokenizer *t, const char *text, size_t len, const zorch_encode_opts *opts,
                                              int32_t **ids, size_t *n);
/* The text of n ids: *out (free() it, NUL-terminated) holds *len bytes. The
   bytes are returned as they are: a cut through a multi-byte character is
   not replaced by U+FFFD. An id out of range is ZORCH_ERR_ARG. */
ZORCH_API zorch_status zorch_tokenizer_decode(const zorch_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len);
/* One more than the largest id (the rows of an embedding table). */
ZORCH_API int32_t zorch_tokenizer_vocab_size(const zorch_tokenizer *t);
/* The token of id as the file spells it (a tokenizer.json's vocab key, such
   as "Ġthe"; a tiktoken file's bytes; an added token's content), *len bytes,
   valid while t is; NULL when no token has that id. */
ZORCH_API const char *zorch_tokenizer_id_to_token(const zorch_tokenizer *t, int32_t id, size_t *len);
/* The id of a token spelled as the file spells it (vocab or added token), or -1. */
ZORCH_API int32_t zorch_tokenizer_token_to_id(const zorch_tokenizer *t, const char *token, size_t len);
/* The id of a special (added) token by its text, or -1. */
ZORCH_API int32_t zorch_tokenizer_special_id(const zorch_tokenizer *t, const char *text);
/* Unicode NFC (the version docs/tokenizers.md names) of len bytes of UTF-8:
   *out (free() it, NUL-terminated) holds *out_len bytes. Bytes that are not
   UTF-8 are kept as they are. */
ZORCH_API zorch_status zorch_nfc(const char *text, size_t len, char **out, size_t *out_len);

/* Tokenizes a text file into an llm.c token file: the 1,024-byte header
   (int32 magic 20240520, version 1 with uint16 ids or 2 with uint32 ids when
   the vocabulary exceeds 65,535, the count), then the ids. opts as in
   encode. *count (may be NULL) gets the number of tokens. */
ZORCH_API zorch_status zorch_tokenizer_encode_file(zorch_tokenizer *t, const char *in_path, const char *out_path,
                                                   const zorch_encode_opts *opts, size_t *count);

#ifdef __cplusplus
}
#endif
#endif
