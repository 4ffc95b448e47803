/* zorch_generate (include/zorch_generate.h): a C host's generation, run by
   zorch.generate inside an embedded VM. The options travel as a Lua chunk of
   numbers (run protected, as everything the VM runs), the prompts and the
   results as int64 tensors through zorch_vm_call. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zorch.h"
#include "zorch_generate.h"

struct zorch_generator_host {
  zorch_vm *vm;
};

/* The VM's side: the model of a folder, and one generate call over tensors. */
static const char HOST_LUA[] =
  "local zorch = require 'zorch'\n"
  "zorch_generate_model = zorch.generation.from_pretrained(zorch_generate_dir)\n"
  "local REASONS = {length = 0, stop = 1, refused = 2}\n"
  "function zorch_generate_host(...)\n"
  "  local prompts = {}\n"
  "  for i, t in ipairs({...}) do prompts[i] = t:totable() end\n"
  "  local out = zorch.generate(zorch_generate_model, prompts, zorch_generate_opts)\n"
  "  local res, codes = {}, {}\n"
  "  for i, r in ipairs(out) do\n"
  "    res[i] = #r.tokens > 0 and zorch.tensor(r.tokens, {dtype = 'int64'}) or zorch.zeros({0}, {dtype = 'int64'})\n"
  "    codes[i] = REASONS[r.finish_reason]\n"
  "  end\n"
  "  res[#res + 1] = zorch.tensor(codes, {dtype = 'int64'})\n"
  "  return table.unpack(res)\n"
  "end\n";

/* A growing string (NULL after a failed allocation). */
typedef struct {
  char *s;
  size_t n, cap;
} buf;
static void put(buf *b, const char *fmt, ...) {
  if (!b->s) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0) goto fail;
  if (b->n + (size_t)k + 1 > b->cap) {
    size_t cap = (b->n + (size_t)k + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) goto fail;
    b->s = s;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
  va_end(ap);
  b->n += (size_t)k;
  return;
fail:
  free(b->s);
  b->s = NULL;
}

/* the VM's message without its traceback: one line for the host */
static zorch_status vm_failed(zorch_vm *vm, zorch_status st) {
  const char *m = zorch_vm_error(vm), *tb = strstr(m, "\nstack traceback:");
  return zorch_set_error(st, "zorch_generate: %.*s", tb ? (int)(tb - m) : (int)strlen(m), m);
}

zorch_generator_host *zorch_generate_load(const char *dir) {
  if (!dir) {
    zorch_set_error(ZORCH_ERR_ARG, "zorch_generate_load: dir is NULL");
    return NULL;
  }
  zorch_vm *vm = zorch_vm_new(NULL);
  if (!vm) return NULL;
  buf b = {malloc(64), 0, 64};
  put(&b, "zorch_generate_dir = %s", "\"");
  for (const char *p = dir; *p; p++) put(&b, "\\%03u", (unsigned)(unsigned char)*p); /* any byte, escaped */
  put(&b, "\"\n");
  zorch_status st = b.s ? zorch_vm_dostring(vm, b.s, "=zorch_generate_load") : ZORCH_ERR_OOM;
  free(b.s);
  if (st == ZORCH_OK) st = zorch_vm_dostring(vm, HOST_LUA, "=zorch_generate");
  if (st != ZORCH_OK) {
    if (st == ZORCH_ERR_OOM && !zorch_vm_error(vm)[0]) zorch_set_error(st, "zorch_generate_load: out of memory");
    else vm_failed(vm, st);
    zorch_vm_free(vm);
    return NULL;
  }
  zorch_generator_host *g = malloc(sizeof *g);
  if (!g) {
    zorch_vm_free(vm);
    zorch_set_error(ZORCH_ERR_OOM, "zorch_generate_load: out of memory");
    return NULL;
  }
  g->vm = vm;
  return g;
}

void zorch_generate_free(zorch_generator_host *g) {
  if (!g) return;
  zorch_vm_free(g->vm);
  free(g);
}

/* the options as `zorch_generate_opts = {...}` (only what differs from the defaults) */
static void put_opts(buf *b, const zorch_generate_opts *o) {
  put(b, "zorch_generate_opts = {max_new_tokens = %d, do_sample = %s", o->max_new_tokens > 0 ? o->max_new_tokens : 16,
      o->do_sample ? "true" : "false");
  if (o->temperature > 0) put(b, ", temperature = %.17g", o->temperature);
  if (o->top_k > 0) put(b, ", top_k = %d", o->top_k);
  if (o->top_p > 0) put(b, ", top_p = %.17g", o->top_p);
  if (o->min_p > 0) put(b, ", min_p = %.17g", o->min_p);
  if (o->repetition_penalty > 0) put(b, ", repetition_penalty = %.17g", o->repetition_penalty);
  if (o->presence_penalty != 0) put(b, ", presence_penalty = %.17g", o->presence_penalty);
  if (o->frequency_penalty != 0) put(b, ", frequency_penalty = %.17g", o->frequency_penalty);
  if (o->has_seed) put(b, ", seed = %" PRId64, o->seed);
  if (o->kv_budget_bytes > 0) put(b, ", budget = %zu", o->kv_budget_bytes);
  if (o->block_size > 0) put(b, ", block_size = %d", o->block_size);
  if (o->n_stop_token_ids > 0) {
    put(b, ", stop_token_ids = {");
    for (int i = 0; i < o->n_stop_token_ids; i++) put(b, "%s%" PRId64, i ? ", " : "", o->stop_token_ids[i]);
    put(b, "}");
  }
  put(b, "}\n");
}

zorch_status zorch_generate(zorch_generator_host *g, int n, const int64_t *const *prompts, const int *lens,
                            const zorch_generate_opts *opts, zorch_generation *out) {
  if (!g || n < 1 || !prompts || !lens || !out)
    return zorch_set_error(ZORCH_ERR_ARG, "zorch_generate: needs a generator, n >= 1 prompts, their lengths and out");
  zorch_generate_opts none = {0};
  const zorch_generate_opts *o = opts ? opts : &none;
  if (o->n_stop_token_ids < 0 || (o->n_stop_token_ids > 0 && !o->stop_token_ids))
    return zorch_set_error(ZORCH_ERR_ARG, "zorch_generate: n_stop_token_ids %d without stop_token_ids", o->n_stop_token_ids);
  for (int i = 0; i < n; i++) {
    out[i] = (zorch_generation){0};
    if (lens[i] < 1 || !prompts[i])
      return zorch_set_error(ZORCH_ERR_ARG, "zorch_generate: prompt %d is empty (length %d)", i, lens[i]);
  }
  buf b = {malloc(256), 0, 256};
  put_opts(&b, o);
  if (!b.s) return zorch_set_error(ZORCH_ERR_OOM, "zorch_generate: out of memory");
  zorch_status st = zorch_vm_dostring(g->vm, b.s, "=zorch_generate_opts");
  free(b.s);
  if (st != ZORCH_OK) return vm_failed(g->vm, st);
  zorch_tensor **ts = calloc((size_t)n * 2 + 1, sizeof *ts);
  if (!ts) return zorch_set_error(ZORCH_ERR_OOM, "zorch_generate: out of memory");
  zorch_tensor **res = ts + n;
  for (int i = 0; i < n && st == ZORCH_OK; i++) {
    ts[i] = zorch_from_buffer(prompts[i], 1, (int64_t[]){lens[i]}, ZORCH_I64);
    if (!ts[i]) st = zorch_last_status();
  }
  if (st == ZORCH_OK) {
    st = zorch_vm_call(g->vm, "zorch_generate_host", n, ts, n + 1, res);
    if (st != ZORCH_OK) vm_failed(g->vm, st);
  }
  int64_t *codes = NULL;
  if (st == ZORCH_OK && (!res[n] || zorch_tensor_numel(res[n]) != n))
    st = zorch_set_error(ZORCH_ERR_INTERNAL, "zorch_generate: the VM returned no finish reasons");
  if (st == ZORCH_OK && !(codes = malloc(sizeof *codes * (size_t)n))) st = zorch_set_error(ZORCH_ERR_OOM, "zorch_generate: out of memory");
  if (st == ZORCH_OK) st = zorch_tensor_to_i64s(res[n], codes, n);
  for (int i = 0; i < n && st == ZORCH_OK; i++) {
    int64_t k = res[i] ? zorch_tensor_numel(res[i]) : -1;
    if (k < 0) { st = zorch_set_error(ZORCH_ERR_INTERNAL, "zorch_generate: the VM returned no tokens for prompt %d", i); break; }
    out[i].tokens = malloc(sizeof(int64_t) * (size_t)(k > 0 ? k : 1));
    if (!out[i].tokens) { st = zorch_set_error(ZORCH_ERR_OOM, "zorch_generate: out of memory"); break; }
    if (k > 0) st = zorch_tensor_to_i64s(res[i], out[i].tokens, k);
    out[i].n_tokens = (int)k;
    out[i].finish = (zorch_finish_reason)codes[i];
  }
  free(codes);
  for (int i = 0; i < 2 * n + 1; i++) zorch_tensor_free(ts[i]);
  free(ts);
  if (st != ZORCH_OK) zorch_generation_free(n, out);
  return st;
}

void zorch_generation_free(int n, zorch_generation *out) {
  if (!out) return;
  for (int i = 0; i < n; i++) {
    free(out[i].tokens);
    out[i] = (zorch_generation){0};
  }
}
