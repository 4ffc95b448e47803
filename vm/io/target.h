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
#endif
