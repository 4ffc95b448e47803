/* target.c: where an atomic write lands (target.h). */
#include "target.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"

zorch_status io_write_target(const char *what, const char *path, char *out) {
  struct stat sb;
  if (snprintf(out, PATH_MAX, "%s", path) >= PATH_MAX) return err_set(ZORCH_ERR_ARG, "%s: path too long", what);
  if (lstat(path, &sb) != 0) return ZORCH_OK; /* a new file */
  if (S_ISLNK(sb.st_mode)) {
    char real[PATH_MAX];
    if (!realpath(path, real)) return ZORCH_OK; /* a dangling link: replaced */
    snprintf(out, PATH_MAX, "%s", real);
    if (stat(out, &sb) != 0) return ZORCH_OK;
  }
  if (!S_ISREG(sb.st_mode))
    return err_set(ZORCH_ERR_IO, "%s: %s is a %s, not a regular file: it is never replaced", what, path,
                   S_ISDIR(sb.st_mode) ? "folder" : S_ISFIFO(sb.st_mode) ? "FIFO" :
                   S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "device" : "special file");
  return ZORCH_OK;
}

int io_create_temp(const char *what, const char *path, char *tmp) {
  static _Atomic unsigned counter;
  for (int tries = 0; tries < 100; tries++) {
    if (snprintf(tmp, IO_TMP_MAX, "%s.tmp.%ld.%u", path, (long)getpid(), counter++) >= IO_TMP_MAX) {
      err_set(ZORCH_ERR_ARG, "%s: path too long", what);
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST) break;
  }
  err_set(ZORCH_ERR_IO, "%s: cannot create a temporary file beside %s: %s", what, path, strerror(errno));
  return -1;
}

zorch_status io_write_all(int fd, const void *p, size_t n, const char *what, const char *path) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return err_set(ZORCH_ERR_IO, "%s: writing %s: %s", what, path, k < 0 ? strerror(errno) : "nothing written");
    c += k;
    n -= (size_t)k;
  }
  return ZORCH_OK;
}

zorch_status zorch_write_file_atomic(const char *path, const void *data, size_t n) {
  if (!path || (n && !data)) return err_set(ZORCH_ERR_ARG, "write: path or data is NULL");
  char target[PATH_MAX], tmp[IO_TMP_MAX];
  zorch_status st = io_write_target("write", path, target);
  if (st) return st;
  int fd = io_create_temp("write", target, tmp);
  if (fd < 0) return zorch_last_status();
  st = io_write_all(fd, data, n, "write", target);
  if (!st && fsync(fd) != 0) st = err_set(ZORCH_ERR_IO, "write: %s: %s", target, strerror(errno));
  if (close(fd) != 0 && !st) st = err_set(ZORCH_ERR_IO, "write: %s: %s", target, strerror(errno));
  if (!st && rename(tmp, target) != 0) st = err_set(ZORCH_ERR_IO, "write: %s: %s", target, strerror(errno));
  if (st) unlink(tmp);
  return st;
}
