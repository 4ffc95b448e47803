/* dnnl_conv_time.c: oneDNN's float32 convolution timed the way conv_time.c
   times zorch's (CPU and wall seconds per forward + backward step, best of 5
   rounds of 10 steps; the step is the forward, the backward to the data when
   INPUT_GRAD, and the backward to the weights and bias), to see whether
   loading it would beat zorch's im2col + OpenBLAS path (ops/cpu/conv.c).
   LAYOUT: plain (NCHW data, OIHW weights: what zorch tensors hold) or any
   (oneDNN's blocked layouts; the reorders to and from them are not timed).
   The forward is checked against a direct loop. Links libdnnl (a benchmark
   only: the library loads oneDNN at run time, ops/cpu/dnnl.c).
   Usage: dnnl_conv_time N C HW OUT K THREADS INPUT_GRAD [plain|any]
   Build: cc -O2 bench/dnnl_conv_time.c -o dnnl_conv_time -ldnnl -fopenmp */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#define CHECK(e)                                                             \
  do {                                                                       \
    dnnl_status_t s_ = (e);                                                  \
    if (s_ != dnnl_success) {                                                \
      fprintf(stderr, "dnnl_conv_time: %s failed (%d)\n", #e, (int)s_);     \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* A memory of the primitive's layout for `what`, and one of the plain layout
   holding `plain` (the data), with the reorder between them done once. */
static dnnl_memory_t mem_for(dnnl_primitive_desc_t pd, dnnl_query_t what, const dnnl_memory_desc_t *plain_md,
                             float *plain, int to_prim) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
  dnnl_memory_t m, p;
  CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  if (!to_prim) return m;
  CHECK(dnnl_memory_create(&p, plain_md, eng, plain));
  dnnl_primitive_desc_t rpd;
  dnnl_primitive_t r;
  CHECK(dnnl_reorder_primitive_desc_create(&rpd, plain_md, eng, md, eng, NULL));
  CHECK(dnnl_primitive_create(&r, rpd));
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, p}, {DNNL_ARG_TO, m}};
  CHECK(dnnl_primitive_execute(r, strm, 2, a));
  CHECK(dnnl_stream_wait(strm));
  dnnl_primitive_destroy(r), dnnl_primitive_desc_destroy(rpd), dnnl_memory_destroy(p);
  return m;
}

static void fill(float *p, size_t n, unsigned *s) {
  for (size_t i = 0; i < n; i++) {
    *s = *s * 1664525u + 1013904223u;
    p[i] = (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

int main(int argc, char **argv) {
  if (argc != 8 && argc != 9) {
    fprintf(stderr, "usage: dnnl_conv_time N C HW OUT K THREADS INPUT_GRAD [plain|any]\n");
    return 2;
  }
  long n = atol(argv[1]), c = atol(argv[2]), hw = atol(argv[3]), o = atol(argv[4]), k = atol(argv[5]);
  int input_grad = atoi(argv[7]), any = argc == 9 && !strcmp(argv[8], "any");
  omp_set_num_threads(atoi(argv[6]));
  long pad = k / 2, ohw = hw + 2 * pad - k + 1;
  size_t nx = (size_t)(n * c * hw * hw), nw = (size_t)(o * c * k * k), ny = (size_t)(n * o * ohw * ohw);
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)o * 4), *gy = malloc(ny * 4),
        *y = malloc(ny * 4);
  unsigned seed = 1;
  fill(x, nx, &seed), fill(w, nw, &seed), fill(b, (size_t)o, &seed), fill(gy, ny, &seed);

  CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  dnnl_dims_t dx = {n, c, hw, hw}, dw = {o, c, k, k}, db = {o}, dy = {n, o, ohw, ohw};
  dnnl_dims_t st = {1, 1}, pl = {pad, pad};
  dnnl_memory_desc_t px, pw, pb, py, ax, aw, ay;
  CHECK(dnnl_memory_desc_init_by_tag(&px, 4, dx, dnnl_f32, dnnl_nchw));
  CHECK(dnnl_memory_desc_init_by_tag(&pw, 4, dw, dnnl_f32, dnnl_oihw));
  CHECK(dnnl_memory_desc_init_by_tag(&pb, 1, db, dnnl_f32, dnnl_x));
  CHECK(dnnl_memory_desc_init_by_tag(&py, 4, dy, dnnl_f32, dnnl_nchw));
  dnnl_format_tag_t tx = any ? dnnl_format_tag_any : dnnl_nchw, tw = any ? dnnl_format_tag_any : dnnl_oihw;
  CHECK(dnnl_memory_desc_init_by_tag(&ax, 4, dx, dnnl_f32, tx));
  CHECK(dnnl_memory_desc_init_by_tag(&aw, 4, dw, dnnl_f32, tw));
  CHECK(dnnl_memory_desc_init_by_tag(&ay, 4, dy, dnnl_f32, tx));

  dnnl_convolution_desc_t fd, bdd, bwd;
  CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &ax, &aw, &pb,
                                           &ay, st, pl, pl));
  CHECK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &ax, &aw, &ay, st, pl, pl));
  CHECK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &ax, &aw, &pb, &ay, st, pl,
                                                    pl));
  dnnl_primitive_desc_t fpd, dpd, wpd;
  CHECK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
  CHECK(dnnl_primitive_desc_create(&dpd, &bdd, NULL, eng, fpd));
  CHECK(dnnl_primitive_desc_create(&wpd, &bwd, NULL, eng, fpd));
  const char *fi, *di, *wi;
  CHECK(dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &fi));
  CHECK(dnnl_primitive_desc_query(dpd, dnnl_query_impl_info_str, 0, &di));
  CHECK(dnnl_primitive_desc_query(wpd, dnnl_query_impl_info_str, 0, &wi));
  dnnl_primitive_t fp, dp, wp;
  CHECK(dnnl_primitive_create(&fp, fpd));
  CHECK(dnnl_primitive_create(&dp, dpd));
  CHECK(dnnl_primitive_create(&wp, wpd));

  dnnl_memory_t mx = mem_for(fpd, dnnl_query_src_md, &px, x, 1), mw = mem_for(fpd, dnnl_query_weights_md, &pw, w, 1);
  dnnl_memory_t mb, my = mem_for(fpd, dnnl_query_dst_md, &py, y, 0);
  CHECK(dnnl_memory_create(&mb, &pb, eng, b));
  dnnl_memory_t mgy = mem_for(dpd, dnnl_query_diff_dst_md, &py, gy, 1);
  dnnl_memory_t mgx = mem_for(dpd, dnnl_query_diff_src_md, &px, NULL, 0);
  dnnl_memory_t mgy2 = mem_for(wpd, dnnl_query_diff_dst_md, &py, gy, 1);
  dnnl_memory_t mx2 = mem_for(wpd, dnnl_query_src_md, &px, x, 1);
  dnnl_memory_t mgw = mem_for(wpd, dnnl_query_diff_weights_md, &pw, NULL, 0);
  dnnl_memory_t mw2 = mem_for(dpd, dnnl_query_weights_md, &pw, w, 1);
  dnnl_memory_t mgb;
  CHECK(dnnl_memory_create(&mgb, &pb, eng, DNNL_MEMORY_ALLOCATE));
  dnnl_exec_arg_t fa[4] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, my}};
  dnnl_exec_arg_t da[3] = {{DNNL_ARG_DIFF_DST, mgy}, {DNNL_ARG_WEIGHTS, mw2}, {DNNL_ARG_DIFF_SRC, mgx}};
  dnnl_exec_arg_t wa[4] = {{DNNL_ARG_SRC, mx2}, {DNNL_ARG_DIFF_DST, mgy2}, {DNNL_ARG_DIFF_WEIGHTS, mgw},
                           {DNNL_ARG_DIFF_BIAS, mgb}};

  double best_cpu = 1e30, best_wall = 1e30;
  for (int r = 0; r < 6; r++) { /* round 0 warms up */
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
    for (int i = 0; i < 10; i++) {
      CHECK(dnnl_primitive_execute(fp, strm, 4, fa));
      if (input_grad) CHECK(dnnl_primitive_execute(dp, strm, 3, da));
      CHECK(dnnl_primitive_execute(wp, strm, 4, wa));
      CHECK(dnnl_stream_wait(strm));
    }
    double dc = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / 10, dwl = (clock_s(CLOCK_MONOTONIC) - w0) / 10;
    if (r > 0 && dc < best_cpu) best_cpu = dc;
    if (r > 0 && dwl < best_wall) best_wall = dwl;
  }

  /* the forward, back in NCHW, against a direct loop */
  dnnl_memory_t pym;
  CHECK(dnnl_memory_create(&pym, &py, eng, y));
  dnnl_primitive_desc_t rpd;
  dnnl_primitive_t rp;
  CHECK(dnnl_reorder_primitive_desc_create(&rpd, dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0), eng,
                                           &py, eng, NULL));
  CHECK(dnnl_primitive_create(&rp, rpd));
  dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, my}, {DNNL_ARG_TO, pym}};
  CHECK(dnnl_primitive_execute(rp, strm, 2, ra));
  CHECK(dnnl_stream_wait(strm));
  double worst = 0;
  for (long in = 0; in < n; in += n > 4 ? n / 4 : 1)
    for (long oc = 0; oc < o; oc++)
      for (long oy = 0; oy < ohw; oy++)
        for (long ox = 0; ox < ohw; ox++) {
          double s = b[oc];
          for (long ic = 0; ic < c; ic++)
            for (long ky = 0; ky < k; ky++)
              for (long kx = 0; kx < k; kx++) {
                long iy = oy + ky - pad, ix = ox + kx - pad;
                if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
                s += (double)x[((in * c + ic) * hw + iy) * hw + ix] * w[((oc * c + ic) * k + ky) * k + kx];
              }
          double d = fabs(s - y[((in * o + oc) * ohw + oy) * ohw + ox]);
          if (d > worst) worst = d;
        }
  printf("oneDNN %s (%s) %s threads: n=%ld c=%ld hw=%ld o=%ld k=%ld: %.2f ms CPU, %.2f ms wall per step "
         "(forward max |error| %.2g)\n  fwd %s, bwd data %s, bwd weights %s\n",
         dnnl_version()->major == 2 ? "2.x" : "?", any ? "any" : "plain", argv[6], n, c, hw, o, k, best_cpu * 1e3,
         best_wall * 1e3, worst, fi, input_grad ? di : "(not run)", wi);
  return 0;
}
