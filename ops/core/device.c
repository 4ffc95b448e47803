/* device.c: device names and the per-type memory registry. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

static const device_mem *mems[ZORCH_NDEVICE_TYPES] = {&host_mem, NULL};

const device_mem *device_mem_get(zorch_device_type type) {
  return (unsigned)type < ZORCH_NDEVICE_TYPES ? mems[type] : NULL;
}

void device_mem_register(zorch_device_type type, const device_mem *m) {
  if ((unsigned)type < ZORCH_NDEVICE_TYPES && type != ZORCH_CPU) mems[type] = m;
}

static const char *whys[ZORCH_NDEVICE_TYPES];

void device_set_why(zorch_device_type type, const char *why) {
  if ((unsigned)type < ZORCH_NDEVICE_TYPES) whys[type] = why;
}
const char *device_why(zorch_device_type type) {
  return (unsigned)type < ZORCH_NDEVICE_TYPES && whys[type] ? whys[type] : "";
}

zorch_status zorch_device_parse(const char *name, zorch_device *out) {
  if (!name) return err_set(ZORCH_ERR_ARG, "device: name is NULL");
  if (strcmp(name, "cpu") == 0) {
    *out = (zorch_device){ZORCH_CPU, 0};
    return ZORCH_OK;
  }
  if (strncmp(name, "cuda", 4) == 0) {
    int idx = 0;
    if (name[4] == ':') {
      char *end;
      long v = strtol(name + 5, &end, 10);
      if (end == name + 5 || *end || v < 0 || v > 1023)
        return err_set(ZORCH_ERR_ARG, "device: bad device name '%s' (expected cuda:N)", name);
      idx = (int)v;
    } else if (name[4]) {
      return err_set(ZORCH_ERR_ARG, "device: unknown device '%s' (expected cpu, cuda or cuda:N)",
                     name);
    }
    *out = (zorch_device){ZORCH_CUDA, idx};
    return ZORCH_OK;
  }
  return err_set(ZORCH_ERR_ARG, "device: unknown device '%s' (expected cpu, cuda or cuda:N)",
                 name);
}

void zorch_device_name(zorch_device dev, char *buf, size_t n) {
  if (dev.type == ZORCH_CPU)
    snprintf(buf, n, "cpu");
  else
    snprintf(buf, n, "cuda:%d", dev.index);
}

