/* products.c: mm, bmm, mv, dot, outer, addmm and baddbmm with PyTorch's
   strict shape rules (no broadcasting of the operands), on matmul. */

#include <string.h>

#include "ops.h"

/* a and b must have ranks ra and rb and one dtype; the contracted sizes
   (a's last, b's first matrix dim) must agree, and the batch too for bmm. */
static zorch_status check_mat(const char *op, const zorch_tensor *a, int ra, const zorch_tensor *b, int rb) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  static const char *const what[] = {"a scalar", "a vector", "a matrix", "a batch of matrices"};
  if (check_arg(op, "input", a) || check_arg(op, "other", b) || check_same_device(op, a, b)) return zorch_last_status();
  if (a->ndim != ra) return err_set(ZORCH_ERR_SHAPE, "%s: input must be %s (%d-D), got shape %s", op, what[ra], ra, SHAPE(a, s1));
  if (b->ndim != rb) return err_set(ZORCH_ERR_SHAPE, "%s: other must be %s (%d-D), got shape %s", op, what[rb], rb, SHAPE(b, s1));
  if (a->dtype != b->dtype)
    return err_set(ZORCH_ERR_DTYPE, "%s: input and other must have one dtype, got %s and %s", op,
                   zorch_dtype_name(a->dtype), zorch_dtype_name(b->dtype));
  int64_t k1 = a->shape[ra - 1], k2 = b->shape[rb == 3 ? 1 : 0];
  bool batch_ok = ra != 3 || a->shape[0] == b->shape[0];
  if (k1 != k2 || !batch_ok)
    return err_set(ZORCH_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied (%s)", op, SHAPE(a, s1), SHAPE(b, s2),
                   batch_ok ? "the inner sizes differ" : "the batch sizes differ");
  return ZORCH_OK;
}

static zorch_tensor *product(const char *op, zorch_tensor *a, int ra, zorch_tensor *b, int rb) {
  if (check_mat(op, a, ra, b, rb)) return NULL;
  if (a->dtype == ZORCH_BOOL) return err_null(ZORCH_ERR_DTYPE, "%s: bool matrices are not supported", op);
  zorch_tensor *out = zorch_matmul(a, b);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_mm(zorch_tensor *a, zorch_tensor *b) { return product("mm", a, 2, b, 2); }
zorch_tensor *zorch_bmm(zorch_tensor *a, zorch_tensor *b) { return product("bmm", a, 3, b, 3); }
zorch_tensor *zorch_mv(zorch_tensor *a, zorch_tensor *v) { return product("mv", a, 2, v, 1); }

zorch_tensor *zorch_dot(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("dot", "input", a) || check_arg("dot", "other", b)) return NULL;
  if (a->ndim != 1 || b->ndim != 1 || a->shape[0] != b->shape[0])
    return err_null(ZORCH_ERR_SHAPE, "dot: expects two vectors of one size, got shapes %s and %s", SHAPE(a, s1),
                    SHAPE(b, s2));
  if (check_mat("dot", a, 1, b, 1)) return NULL;
  if (a->dtype == ZORCH_BOOL) return err_null(ZORCH_ERR_DTYPE, "dot: bool vectors are not supported");
  zorch_tensor *out = zorch_matmul(a, b);
  if (!out) err_prefix("dot");
  return out;
}

zorch_tensor *zorch_outer(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("outer", "input", a) || check_arg("outer", "vec2", b)) return NULL;
  if (a->ndim != 1 || b->ndim != 1)
    return err_null(ZORCH_ERR_SHAPE, "outer: expects two vectors, got shapes %s and %s", SHAPE(a, s1), SHAPE(b, s2));
  zorch_tensor *u = NULL, *v = NULL, *out = NULL;
  if ((u = zorch_unsqueeze(a, 1)) && (v = zorch_unsqueeze(b, 0))) out = zorch_mul(u, v);
  OP_FREE(u, v);
  if (!out) err_prefix("outer");
  return out;
}

/* c's gradient when beta is 0: zeros, as PyTorch gives. */
static zorch_status zero_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = op_zeros(g, n->in[0].ndim, n->in[0].shape, g->dtype);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

/* beta * c + alpha * (a @ b), c broadcast to the product's shape; c is not
   read when beta is 0 (its NaNs do not spread, as PyTorch), and gets a zero
   gradient through a node of its own. */
static zorch_tensor *add_product(const char *op, zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta,
                                 double alpha, int rank) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg(op, "input", c) || check_mat(op, a, rank, b, rank)) return NULL;
  int64_t sh[3];
  for (int i = 0; i < rank; i++) sh[i] = i == rank - 1 ? b->shape[rank - 1] : a->shape[i];
  int nd;
  int64_t bs[ZORCH_MAX_DIMS];
  if (c->ndim > rank || shape_broadcast(op, c->ndim, c->shape, rank, sh, &nd, bs) ||
      memcmp(bs, sh, sizeof(int64_t) * (size_t)rank) != 0) {
    zorch_clear_error();
    return err_null(ZORCH_ERR_SHAPE, "%s: input %s does not broadcast to the product's shape %s", op, SHAPE(c, s1),
                    err_shape_str(rank, sh, s2, sizeof s2));
  }
  zorch_tensor *p = NULL, *ps = NULL, *cs = NULL, *out = NULL;
  if ((p = zorch_matmul(a, b)) && (ps = alpha == 1 ? zorch_tensor_retain(p) : zorch_mul_scalar(p, alpha))) {
    if (beta == 0 && !(zorch_is_grad_enabled() && zorch_requires_grad(c))) out = zorch_tensor_retain(ps);
    else if (beta == 0) {
      bool prev = zorch_set_grad_enabled(false);
      zorch_tensor *z = op_zeros(c, c->ndim, c->shape, ps->dtype);
      zorch_set_grad_enabled(prev);
      if ((cs = ag_record(z, "AddmmBackward", zero_bwd, 1, &c, 0, NULL, NULL, 0))) out = zorch_add(ps, cs);
    }
    else if ((cs = beta == 1 ? zorch_tensor_retain(c) : zorch_mul_scalar(c, beta))) out = zorch_add(cs, ps);
  }
  OP_FREE(p, ps, cs);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_addmm(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha) {
  return add_product("addmm", c, a, b, beta, alpha, 2);
}

zorch_tensor *zorch_baddbmm(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha) {
  return add_product("baddbmm", c, a, b, beta, alpha, 3);
}
