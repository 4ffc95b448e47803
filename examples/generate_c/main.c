/* generate_c: greedy (or sampled) generation from a C host through
   zorch_generate.h alone. Each prompt is an argument of 0-based token ids
   separated by commas; one line of generated ids per prompt on stdout.
     generate_c DIR [--max-new N] [--eos ID] [--sample --seed S --temperature T --top-p P] IDS [IDS ...]
   A bad argument or a failure ends it with status 2 and one line on stderr. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zorch_generate.h"

static int usage(const char *msg) {
  fprintf(stderr, "generate_c: %s\nusage: generate_c DIR [--max-new N] [--eos ID] [--sample] [--seed S] "
                  "[--temperature T] [--top-p P] IDS [IDS ...]\n", msg);
  return 2;
}

/* "1,2,3" into ids (malloc'ed); the count, or -1 */
static int parse_ids(const char *s, int64_t **ids) {
  int n = 1;
  for (const char *p = s; *p; p++) n += *p == ',';
  *ids = malloc(sizeof **ids * (size_t)n);
  if (!*ids) return -1;
  char *end;
  for (int i = 0; i < n; i++) {
    (*ids)[i] = strtoll(s, &end, 10);
    if (end == s || (*end != ',' && *end != '\0')) return -1;
    s = end + 1;
  }
  return n;
}

int main(int argc, char **argv) {
  if (argc < 3) return usage("needs a model folder and at least one prompt");
  zorch_generate_opts o = {.max_new_tokens = 16};
  int64_t eos = -1;
  int first = 2;
  for (; first < argc && strncmp(argv[first], "--", 2) == 0; first++) {
    const char *f = argv[first], *v = first + 1 < argc ? argv[first + 1] : NULL;
    if (strcmp(f, "--sample") == 0) { o.do_sample = 1; continue; }
    if (!v) return usage("a flag without its value");
    if (strcmp(f, "--max-new") == 0) o.max_new_tokens = atoi(v);
    else if (strcmp(f, "--eos") == 0) eos = strtoll(v, NULL, 10);
    else if (strcmp(f, "--seed") == 0) { o.has_seed = 1; o.seed = strtoll(v, NULL, 10); }
    else if (strcmp(f, "--temperature") == 0) o.temperature = atof(v);
    else if (strcmp(f, "--top-p") == 0) o.top_p = atof(v);
    else return usage("unknown flag");
    first++;
  }
  if (eos >= 0) { o.stop_token_ids = &eos; o.n_stop_token_ids = 1; }
  int n = argc - first;
  if (n < 1) return usage("no prompt");
  int64_t **prompts = calloc((size_t)n, sizeof *prompts);
  int *lens = calloc((size_t)n, sizeof *lens);
  zorch_generation *out = calloc((size_t)n, sizeof *out);
  int rc = 0;
  if (!prompts || !lens || !out) { rc = usage("out of memory"); goto done; }
  for (int i = 0; i < n; i++)
    if ((lens[i] = parse_ids(argv[first + i], &prompts[i])) < 0) { rc = usage("a prompt is not a list of ids"); goto done; }
  zorch_generator_host *g = zorch_generate_load(argv[1]);
  if (!g) { fprintf(stderr, "generate_c: %s\n", zorch_last_error()); rc = 2; goto done; }
  if (zorch_generate(g, n, (const int64_t *const *)prompts, lens, &o, out) != ZORCH_OK) {
    fprintf(stderr, "generate_c: %s\n", zorch_last_error());
    rc = 2;
  } else {
    static const char *reason[] = {"length", "stop", "refused"};
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < out[i].n_tokens; k++) printf("%s%" PRId64, k ? " " : "", out[i].tokens[k]);
      printf("\t%s\n", reason[out[i].finish]);
    }
  }
  zorch_generation_free(n, out);
  zorch_generate_free(g);
done:
  for (int i = 0; prompts && i < n; i++) free(prompts[i]);
  free(prompts);
  free(lens);
  free(out);
  return rc;
}
