/* events.c: TensorBoard event files, encoded by hand: CRC32C, the record
   framing, and the few protobuf fields of a scalar Event.

   A record is  uint64 length (LE) | uint32 masked crc32c(length) | data |
   uint32 masked crc32c(data),  masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
   data is an Event { double wall_time = 1; int64 step = 2; string file_version = 3;
   Summary summary = 5 }, Summary { repeated Value value = 1 },
   Value { string tag = 1; float simple_value = 2 }. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit: records are small. */
static uint32_t tb_crc32c(const uint8_t *p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xffffffffu;
}

static uint32_t tb_masked_crc(const uint8_t *p, size_t n) {
  uint32_t c = tb_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A growable byte buffer; a failed write marks it failed and writes nothing more. */
typedef struct {
  uint8_t *p;
  size_t len, cap;
  int failed;
} tb_buf;

#define TB_MAX_BYTES ((size_t)1 << 26) /* one event's limit: 64 MiB */

static void tb_put(tb_buf *b, const void *src, size_t n) {
  if (b->failed) return;
  if (n > TB_MAX_BYTES - b->len) {
    b->failed = 1;
    return;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      b->failed = 1;
      return;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
}

static void tb_varint(tb_buf *b, uint64_t v) {
  uint8_t out[10];
  size_t n = 0;
  do {
    out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  tb_put(b, out, n);
}

static void tb_le(tb_buf *b, uint64_t v, int bytes) {
  uint8_t out[8];
  for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
  tb_put(b, out, (size_t)bytes);
}

/* protobuf wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void tb_key(tb_buf *b, int field, int wire) { tb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void tb_bytes_field(tb_buf *b, int field, const void *p, size_t n) {
  tb_key(b, field, 2);
  tb_varint(b, n);
  tb_put(b, p, n);
}

static void tb_double_field(tb_buf *b, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  tb_key(b, field, 1);
  tb_le(b, u, 8);
}

static void tb_float_field(tb_buf *b, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  tb_key(b, field, 5);
  tb_le(b, u, 4);
}

/* One Summary.Value { tag, simple_value } appended to a Summary being built. */
static void tb_summary_value(tb_buf *summary, const char *tag, size_t tag_len, float v) {
  tb_buf val = {0};
  tb_bytes_field(&val, 1, tag, tag_len);
  tb_float_field(&val, 2, v);
  if (val.failed) summary->failed = 1;
  else tb_bytes_field(summary, 1, val.p, val.len);
  free(val.p);
}

/* The framed record of an Event into out; 0 on success. */
static int tb_frame(tb_buf *out, const tb_buf *event) {
  if (event->failed) return -1;
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)event->len >> (8 * i));
  tb_put(out, len, 8);
  tb_le(out, tb_masked_crc(len, 8), 4);
  tb_put(out, event->p, event->len);
  tb_le(out, tb_masked_crc(event->p, event->len), 4);
  return out->failed ? -1 : 0;
}

static double tb_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

uint32_t zorch_crc32c(const void *p, size_t n, bool masked) {
  if (!p) n = 0;
  return masked ? tb_masked_crc(p, n) : tb_crc32c(p, n);
}

zorch_status zorch_event_encode(int64_t step, double wall_time, const char *file_version, int n,
                                const char *const *tags, const size_t *tag_lens, const double *values,
                                void **out, size_t *len) {
  if (!out || !len || n < 0 || (n && (!tags || !values)))
    return err_set(ZORCH_ERR_ARG, "tensorboard: bad arguments to zorch_event_encode");
  *out = NULL;
  *len = 0;
  for (int i = 0; i < n; i++)
    if (!tags[i]) return err_set(ZORCH_ERR_ARG, "tensorboard: tag %d is NULL", i);
  tb_buf summary = {0}, event = {0}, rec = {0};
  for (int i = 0; i < n; i++)
    tb_summary_value(&summary, tags[i], tag_lens ? tag_lens[i] : strlen(tags[i]), (float)values[i]);
  tb_double_field(&event, 1, isnan(wall_time) ? tb_now() : wall_time);
  tb_key(&event, 2, 0);
  tb_varint(&event, (uint64_t)step); /* int64: negatives take ten bytes */
  if (file_version) tb_bytes_field(&event, 3, file_version, strlen(file_version));
  if (n) {
    if (summary.failed) event.failed = 1;
    else tb_bytes_field(&event, 5, summary.p, summary.len);
  }
  int rc = tb_frame(&rec, &event);
  free(summary.p);
  free(event.p);
  if (rc) {
    free(rec.p);
    return err_set(ZORCH_ERR_OOM, "tensorboard: cannot encode an event of %d values (out of memory or over 64 MiB)", n);
  }
  *out = rec.p;
  *len = rec.len;
  return ZORCH_OK;
}

zorch_status zorch_events_filename(const char *dir, char *buf, size_t n) {
  if (!dir || !buf) return err_set(ZORCH_ERR_ARG, "tensorboard: dir or buf is NULL");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
  host[sizeof host - 1] = 0;
  int k = snprintf(buf, n, "%s/events.out.tfevents.%010lld.%s.%d", dir, (long long)time(NULL), host, (int)getpid());
  if (k < 0 || (size_t)k >= n) return err_set(ZORCH_ERR_ARG, "tensorboard: the file name under %s is too long", dir);
  return ZORCH_OK;
}

struct zorch_events {
  FILE *f;
  char path[4096];
};

/* Writes one encoded record; the error names the file. */
static zorch_status ev_write(zorch_events *w, int64_t step, const char *version, int n, const char *const *tags,
                             const double *values) {
  void *rec;
  size_t len;
  zorch_status st = zorch_event_encode(step, NAN, version, n, tags, NULL, values, &rec, &len);
  if (st) return st;
  if (fwrite(rec, 1, len, w->f) != len) st = err_set(ZORCH_ERR_IO, "tensorboard: writing %s: %s", w->path, strerror(errno));
  free(rec);
  return st;
}

zorch_status zorch_events_open(const char *dir, zorch_events **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "tensorboard: out is NULL");
  *out = NULL;
  zorch_events *w = calloc(1, sizeof *w);
  if (!w) return err_set(ZORCH_ERR_OOM, "tensorboard: out of memory");
  zorch_status st = zorch_events_filename(dir, w->path, sizeof w->path);
  if (!st && !(w->f = fopen(w->path, "wbx")))
    st = err_set(ZORCH_ERR_IO, "tensorboard: cannot create %s: %s", w->path, strerror(errno));
  if (!st) st = ev_write(w, 0, "brain.Event:2", 0, NULL, NULL);
  if (st) {
    if (w->f) {
      fclose(w->f);
      unlink(w->path);
    }
    free(w);
    return st;
  }
  *out = w;
  return ZORCH_OK;
}

const char *zorch_events_path(const zorch_events *w) { return w ? w->path : NULL; }

zorch_status zorch_events_add_scalar(zorch_events *w, const char *tag, double value, int64_t step) {
  if (!w || !tag) return err_set(ZORCH_ERR_ARG, "tensorboard: writer or tag is NULL");
  return ev_write(w, step, NULL, 1, &tag, &value);
}

zorch_status zorch_events_flush(zorch_events *w) {
  if (!w) return err_set(ZORCH_ERR_ARG, "tensorboard: writer is NULL");
  if (fflush(w->f) != 0) return err_set(ZORCH_ERR_IO, "tensorboard: writing %s: %s", w->path, strerror(errno));
  return ZORCH_OK;
}

zorch_status zorch_events_close(zorch_events *w) {
  if (!w) return ZORCH_OK;
  zorch_status st = ZORCH_OK;
  if (fclose(w->f) != 0) st = err_set(ZORCH_ERR_IO, "tensorboard: closing %s: %s", w->path, strerror(errno));
  free(w);
  return st;
}
