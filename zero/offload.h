/* offload.h: optimizer state on NVMe (ZeRO-Infinity's offload_optimizer device
   "nvme"). Adam's two moments of a rank's shard live in one file under the
   configured folder, in chunks; a step streams them through a few buffers,
   reading ahead and writing behind on an I/O thread while the current chunk is
   updated, so memory holds `nbuf` chunks, not the shard. The update is
   zorch_adam_step on each chunk: the same arithmetic, element for element, as
   over the whole shard. With the parameters on NVMe too (offload_param), the
   store is bound to their file and streams parameter, gradient and moments
   together. The files are read and written with direct I/O (O_DIRECT) where
   the filesystem allows it, so they never fill the page cache: memory holds
   the buffers and nothing else of the state. */
#ifndef ZORCH_ZERO_OFFLOAD_H
#define ZORCH_ZERO_OFFLOAD_H
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "zorch_zero.h"

typedef struct zoff zoff;

/* A store for numel elements' moments (float32, zeros) in a new file under dir,
   unlinked at once (it is gone when the store closes or the process ends),
   moved in chunks of `chunk` elements through nbuf >= 2 buffers. NULL with the
   error set. A chunk that is a multiple of ZOFF_ALIGN / 4 elements moves with
   direct I/O (each chunk's fields start on an aligned offset; the last chunk's
   transfers are rounded up to the alignment, the file padded for them) unless
   the filesystem refuses it or ZORCH_OFFLOAD_DIRECT=0; other chunk sizes go
   through the page cache. */
zoff *zoff_open(const char *dir, int64_t numel, int64_t chunk, int nbuf);
void zoff_close(zoff *o);
/* The parameters and gradients of the store's elements live in the file fd
   (duplicated: the store keeps its own descriptor), float32 from byte offsets
   p_off and g_off: from now on zoff_adam reads both with the moments and
   writes the parameters back, and ignores the data of the tensors it is
   given (their sizes are still checked). The buffers grow to four fields.
   With direct I/O and both offsets aligned, the parameters move with direct
   I/O too (the file must then extend to the aligned end of both regions). */
zorch_status zoff_bind_params(zoff *o, int fd, int64_t p_off, int64_t g_off);
/* With the parameters bound: the next zoff_adam multiplies each chunk's
   gradient by s (the clip and loss-scale factor the in-memory step applies to
   the whole gradient first: the same product, element for element) before its
   update, so the gradient is read once and never written back. 1: none. The
   factor is used by one step. */
void zoff_set_grad_scale(zoff *o, double s);
/* The elements [lo, lo + len) of the store that one group's options update;
   step: their own step count (a parameter stepped fewer times than the
   optimizer, having been frozen), or 0 for the call's. */
typedef zorch_offload_run zoff_run; /* include/zorch_zero.h */
/* One Adam step of param (float32, numel contiguous elements on the CPU) with
   grad, the moments streamed from and back to the file; each run's elements
   with its options, the others left as they are. */
zorch_status zoff_adam(zoff *o, zorch_tensor *param, zorch_tensor *grad, int64_t step, int nruns, const zoff_run *runs);
/* The moments, whole, into m and v (float32, numel, contiguous), or from them
   into the file (checkpoints); zoff_zero sets both to zeros (a fresh state). */
zorch_status zoff_get(zoff *o, zorch_tensor *m, zorch_tensor *v);
zorch_status zoff_put(zoff *o, const zorch_tensor *m, const zorch_tensor *v);
zorch_status zoff_zero(zoff *o);

typedef zorch_offload_stats zoff_stats;
void zoff_get_stats(const zoff *o, zoff_stats *s);

/* The disk under dir, measured: `bytes` written then read back with direct
   I/O (O_DIRECT, 4 MiB requests) in a file made and unlinked there, in MB/s
   (10^6 bytes). Where the filesystem refuses direct I/O (tmpfs) the result
   is through the page cache and *direct says so. ZORCH_OK or the error. */
zorch_status zoff_probe(const char *dir, int64_t bytes, double *write_mbps, double *read_mbps, bool *direct);

/* Direct I/O, shared with the parameter file (zero/param_file.c). */
#define ZOFF_ALIGN 4096 /* bytes: offsets, lengths and buffers of direct transfers */
/* A new descriptor for the file behind fd (read and write, its own open file
   description), with O_DIRECT when `direct`, without it otherwise; -1 with
   errno on failure (EINVAL: the filesystem refuses direct I/O, as tmpfs may).
   With `direct`, an aligned write of zeros at byte offset `probe` checks that
   direct writes work (some filesystems accept O_DIRECT at open and refuse the
   I/O); the caller sizes the file afterwards. */
int zoff_reopen(int fd, bool direct, off_t probe);
/* len bytes at byte offset at of fd into buf (or, write, from buf), whole.
   With `direct` (fd has O_DIRECT) an unaligned buffer, offset or length goes
   through an aligned bounce buffer, partial blocks at either end read first
   for a write (the caller keeps concurrent writes out of the same blocks).
   false with errno on failure. */
bool zoff_pio(int fd, bool direct, bool write, void *buf, size_t len, off_t at);
#endif
