/* target.h: where an atomic write (a temporary file, then rename) lands. */
#ifndef ZORCH_VM_IO_TARGET_H
#define ZORCH_VM_IO_TARGET_H
#include <limits.h>
#include <stddef.h>

#include "zorch.h"

/* The file to replace for a write to `path` (what = the caller, for the
   message): `path` itself, or the file a symlink at `path` leads to (the link
   stays, as a plain open-and-write would leave it). An error when that is
   something other than a regular file: a rename would put a file in place of
   a device, a FIFO or a folder (zorch.save to /dev/full as root replaced the
   device). out holds PATH_MAX bytes. */
zorch_status io_write_target(const char *what, const char *path, char *out);
/* Creates a new temporary file beside path, named into tmp (IO_TMP_MAX bytes),
   and returns its descriptor (0666, so the umask applies); -1 with the error
   set. The name is always a new file: a file or symlink already at a name
   is never opened, so nothing left there can redirect the write. */
#define IO_TMP_MAX (PATH_MAX + 48)
int io_create_temp(const char *what, const char *path, char *tmp);
/* Writes n bytes to fd, through short writes and EINTR; the error names what and path. */
zorch_status io_write_all(int fd, const void *p, size_t n, const char *what, const char *path);
#endif
