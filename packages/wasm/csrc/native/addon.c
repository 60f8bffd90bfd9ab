/*
 * The native build's Node-API surface: the same functions the WebAssembly binaries export, with
 * the same arguments, so src/native.ts can hand the engine (and its worker threads) an object
 * that looks like a wasm instance's exports.
 *
 * Memory is the engine's shared WebAssembly.Memory, as for the wasm binaries: bind(view) takes a
 * Uint8Array over it and returns that object of functions, each carrying the memory's base
 * address as its Node-API data, so an argument that is a pointer in the wasm build (a byte
 * offset into linear memory, 0 = none) becomes base + offset here. A shared memory never moves
 * when it grows (every thread holds its address), so one binding serves the memory's lifetime. The
 * caller keeps the memory alive while it uses the functions (the engine holds it), and passes only
 * offsets the engine computed: unlike WebAssembly, nothing here checks them against the memory.
 *
 * fa_problem and fa_kv are written by src/params.ts in the wasm layout (32-bit pointers, 152 and
 * 216 bytes); read_problem / read_kv rebuild them with real pointers before every call.
 *
 * Node-API is a stable C ABI: the few declarations used are written out in napi.h instead of
 * depending on Node's headers being installed. The model ops' direct entries (direct.c), which
 * take typed arrays instead of offsets, are registered beside bind().
 */
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
#include "../fa.h"
#include "../kvcache.h"

#include "napi.h"


/* ---- the kernels (the .c files of csrc/) ---- */
int32_t fa_forward_scratch_bytes(const fa_problem *p);
void fa_scale(float *x, int32_t n, float s);
void fa_pack_kv(const fa_problem *p, int32_t b, int32_t kvh);
void fa_forward_unit(const fa_problem *p, float *scratch, int32_t b, int32_t kvh, int32_t qt);
int32_t fa_backward_scratch_bytes(const fa_problem *p);
void fa_dvec(const fa_problem *p, const float *out);
void fa_backward_unit(const fa_problem *p, float *scratch, int32_t b, int32_t kvh, int32_t kt_start, int32_t kt_end, float *dq_private);
void fa_encode16(float *data, int32_t n, int32_t bf16);
void fa_copy_range(const uint8_t *src, int32_t n, uint8_t *dst, int32_t ring, int32_t method);
int32_t fa_gemm_ws_bytes(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k);
void fa_gemm_f32(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k, const float *a, const float *b, float *c, int32_t accumulate, float *ws);
void fa_test_mm(int32_t form, int32_t m, int32_t n, int32_t k, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc);
void fa_test_vmath(int32_t fn, const float *x, float *y, int32_t n);
void fa_test_widen(int32_t dt, const void *src, float *dst, int32_t n);

/* ---- the wasm layout of fa_problem and fa_kv (src/params.ts) ---- */
typedef struct {
  int32_t batch, h, hkv, d, tq, tk, total_q, total_k, varlen, window_left, window_right, br, bc;
  float scale, softcap;
  uint32_t cu_q, cu_k, alibi, q, k, v, kt, vp, kt_first, lse, dout, dvec, dk, dv, dq, sinks;
  uint32_t dropout_threshold, dropout_k0, dropout_k1, dropout_offset;
  float dropout_scale;
  int32_t dv_dim;
  uint32_t o;
} wire_problem;
_Static_assert(sizeof(wire_problem) == 152, "wire_problem must match src/params.ts PROBLEM_BYTES");

typedef struct {
  wire_problem base;
  int32_t dtype, block_size, max_blocks, tnew, qt, rows, chunk, heads;
  uint32_t lens, table, k_cache, v_cache, pm, pl, pacc, leftpad;
} wire_kv;
_Static_assert(sizeof(wire_kv) == 216, "wire_kv must match src/params.ts KV_PROBLEM_BYTES");

#define AT(base, off) ((off) ? (void *)((base) + (uint32_t)(off)) : (void *)0)

static void read_problem(uint8_t *m, uint32_t at, fa_problem *p) {
  const wire_problem *w = (const wire_problem *)(m + at);
  p->batch = w->batch, p->h = w->h, p->hkv = w->hkv, p->d = w->d, p->tq = w->tq, p->tk = w->tk;
  p->total_q = w->total_q, p->total_k = w->total_k, p->varlen = w->varlen;
  p->window_left = w->window_left, p->window_right = w->window_right, p->br = w->br, p->bc = w->bc;
  p->scale = w->scale, p->softcap = w->softcap;
  p->cu_q = AT(m, w->cu_q), p->cu_k = AT(m, w->cu_k), p->alibi = AT(m, w->alibi);
  p->q = AT(m, w->q), p->k = AT(m, w->k), p->v = AT(m, w->v), p->kt = AT(m, w->kt), p->vp = AT(m, w->vp);
  p->kt_first = AT(m, w->kt_first), p->lse = AT(m, w->lse), p->dout = AT(m, w->dout), p->dvec = AT(m, w->dvec);
  p->dk = AT(m, w->dk), p->dv = AT(m, w->dv), p->dq = AT(m, w->dq), p->sinks = AT(m, w->sinks);
  p->dropout_threshold = w->dropout_threshold, p->dropout_k0 = w->dropout_k0, p->dropout_k1 = w->dropout_k1;
  p->dropout_offset = w->dropout_offset, p->dropout_scale = w->dropout_scale;
  p->dv_dim = w->dv_dim, p->o = AT(m, w->o);
}

static void read_kv(uint8_t *m, uint32_t at, fa_kv *kv) {
  const wire_kv *w = (const wire_kv *)(m + at);
  read_problem(m, at, &kv->base);
  kv->dtype = w->dtype, kv->block_size = w->block_size, kv->max_blocks = w->max_blocks, kv->tnew = w->tnew;
  kv->qt = w->qt, kv->rows = w->rows, kv->chunk = w->chunk, kv->heads = w->heads;
  kv->lens = AT(m, w->lens), kv->table = AT(m, w->table), kv->k_cache = AT(m, w->k_cache), kv->v_cache = AT(m, w->v_cache);
  kv->pm = AT(m, w->pm), kv->pl = AT(m, w->pl), kv->pacc = AT(m, w->pacc), kv->leftpad = AT(m, w->leftpad);
}

/* ---- argument reading: a call's arguments as int32 (i), offsets (u) and floats (f) ---- */
#define MAX_ARGS 10
typedef struct {
  napi_env env;
  uint8_t *m;
  size_t argc;
  napi_value argv[MAX_ARGS];
  int bad;
} call_args;

static int args_of(napi_env env, napi_callback_info info, size_t want, call_args *a) {
  void *data = 0;
  a->env = env;
  a->argc = MAX_ARGS;
  a->bad = napi_get_cb_info(env, info, &a->argc, a->argv, 0, &data) != 0 || a->argc < want;
  a->m = (uint8_t *)data;
  if (a->bad) napi_throw_error(env, "E_ARG", "@fa/wasm native: a kernel was called with too few arguments");
  return !a->bad;
}
static int32_t ai(call_args *a, size_t k) {
  int32_t v = 0;
  if (napi_get_value_int32(a->env, a->argv[k], &v) != 0) a->bad = 1;
  return v;
}
static uint32_t au(call_args *a, size_t k) {
  uint32_t v = 0;
  if (napi_get_value_uint32(a->env, a->argv[k], &v) != 0) a->bad = 1;
  return v;
}
static double af(call_args *a, size_t k) {
  double v = 0;
  if (napi_get_value_double(a->env, a->argv[k], &v) != 0) a->bad = 1;
  return v;
}
static void *ap(call_args *a, size_t k) { return AT(a->m, au(a, k)); }

static napi_value done(call_args *a) {
  napi_value u = 0;
  if (a->bad) napi_throw_error(a->env, "E_ARG", "@fa/wasm native: a kernel argument is not a number");
  else napi_get_undefined(a->env, &u);
  return u;
}
static napi_value done_i32(call_args *a, int32_t v) {
  napi_value r = 0;
  if (a->bad) return done(a);
  napi_create_int32(a->env, v, &r);
  return r;
}

/*
 * WebAssembly's float arithmetic is IEEE's default: round to nearest, subnormals kept. A native
 * thread's MXCSR may say otherwise (another addon in the process can set flush-to-zero or
 * denormals-are-zero), so every kernel runs under the default control bits and the caller's are
 * put back after (the exception flags, bits 0-5, are left alone).
 */
#define MXCSR_CONTROL 0xffc0u
#define MXCSR_DEFAULT 0x1f80u
static inline unsigned fp_enter(void) {
  const unsigned c = _mm_getcsr();
  if ((c & MXCSR_CONTROL) != MXCSR_DEFAULT) _mm_setcsr((c & ~MXCSR_CONTROL) | MXCSR_DEFAULT);
  return c;
}
static inline void fp_leave(unsigned c) {
  if ((c & MXCSR_CONTROL) != MXCSR_DEFAULT) _mm_setcsr(c);
}
/* Runs a kernel call when every argument was read (a kernel never runs on a bad one). */
#define RUN(call)                      \
  do {                                 \
    if (!a.bad) {                      \
      const unsigned csr_ = fp_enter(); \
      call;                            \
      fp_leave(csr_);                  \
    }                                  \
  } while (0)

/* Each wrapper checks its arguments before it calls the kernel. */
#define PROBLEM(k) fa_problem p_; if (!a.bad) read_problem(a.m, au(&a, k), &p_)
#define KV(k) fa_kv kv_; if (!a.bad) read_kv(a.m, au(&a, k), &kv_)

static napi_value w_forward_scratch_bytes(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 1, &a)) return 0;
  PROBLEM(0);
  return a.bad ? done(&a) : done_i32(&a, fa_forward_scratch_bytes(&p_));
}
static napi_value w_backward_scratch_bytes(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 1, &a)) return 0;
  PROBLEM(0);
  return a.bad ? done(&a) : done_i32(&a, fa_backward_scratch_bytes(&p_));
}
static napi_value w_scale(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 3, &a)) return 0;
  float *x = ap(&a, 0);
  int32_t n = ai(&a, 1);
  float s = (float)af(&a, 2);
  RUN(fa_scale(x, n, s));
  return done(&a);
}
static napi_value w_encode16(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 3, &a)) return 0;
  float *x = ap(&a, 0);
  int32_t n = ai(&a, 1), bf16 = ai(&a, 2);
  RUN(fa_encode16(x, n, bf16));
  return done(&a);
}
static napi_value w_pack_kv(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 3, &a)) return 0;
  PROBLEM(0);
  int32_t b = ai(&a, 1), kvh = ai(&a, 2);
  RUN(fa_pack_kv(&p_, b, kvh));
  return done(&a);
}
static napi_value w_forward_unit(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 5, &a)) return 0;
  PROBLEM(0);
  float *scratch = ap(&a, 1);
  int32_t b = ai(&a, 2), kvh = ai(&a, 3), qt = ai(&a, 4);
  RUN(fa_forward_unit(&p_, scratch, b, kvh, qt));
  return done(&a);
}
static napi_value w_dvec(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 2, &a)) return 0;
  PROBLEM(0);
  const float *out = ap(&a, 1);
  RUN(fa_dvec(&p_, out));
  return done(&a);
}
static napi_value w_backward_unit(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 7, &a)) return 0;
  PROBLEM(0);
  float *scratch = ap(&a, 1), *dq = ap(&a, 6);
  int32_t b = ai(&a, 2), kvh = ai(&a, 3), k0 = ai(&a, 4), k1 = ai(&a, 5);
  RUN(fa_backward_unit(&p_, scratch, b, kvh, k0, k1, dq));
  return done(&a);
}
static napi_value w_kv_scratch_bytes(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 1, &a)) return 0;
  KV(0);
  return a.bad ? done(&a) : done_i32(&a, fa_kv_scratch_bytes(&kv_));
}
static napi_value w_kv_unit(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 8, &a)) return 0;
  KV(0);
  float *scratch = ap(&a, 1);
  int32_t b = ai(&a, 2), h0 = ai(&a, 3), h1 = ai(&a, 4), t = ai(&a, 5), c = ai(&a, 6), slot0 = ai(&a, 7);
  RUN(fa_kv_unit(&kv_, scratch, b, h0, h1, t, c, slot0));
  return done(&a);
}
static napi_value w_kv_combine(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 7, &a)) return 0;
  KV(0);
  float *scratch = ap(&a, 1);
  int32_t b = ai(&a, 2), kvh = ai(&a, 3), t = ai(&a, 4), slot0 = ai(&a, 5), chunks = ai(&a, 6);
  RUN(fa_kv_combine(&kv_, scratch, b, kvh, t, slot0, chunks));
  return done(&a);
}
static napi_value w_copy_range(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 5, &a)) return 0;
  const uint8_t *src = ap(&a, 0);
  uint8_t *dst = ap(&a, 2);
  int32_t n = ai(&a, 1), ring = ai(&a, 3), method = ai(&a, 4);
  RUN(fa_copy_range(src, n, dst, ring, method));
  return done(&a);
}
/* The native build runs on the thread's own stack: nothing to move. */
static napi_value w_set_stack(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 1, &a)) return 0;
  return done(&a);
}
static napi_value w_problem_bytes(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 0, &a)) return 0;
  return done_i32(&a, (int32_t)sizeof(wire_problem));
}
static napi_value w_gemm_ws_bytes(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 5, &a)) return 0;
  int32_t ta = ai(&a, 0), tb = ai(&a, 1), m = ai(&a, 2), n = ai(&a, 3), k = ai(&a, 4);
  return a.bad ? done(&a) : done_i32(&a, fa_gemm_ws_bytes(ta, tb, m, n, k));
}
static napi_value w_gemm_f32(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 10, &a)) return 0;
  int32_t ta = ai(&a, 0), tb = ai(&a, 1), m = ai(&a, 2), n = ai(&a, 3), k = ai(&a, 4), acc = ai(&a, 8);
  const float *pa = ap(&a, 5), *pb = ap(&a, 6);
  float *pc = ap(&a, 7), *ws = ap(&a, 9);
  RUN(fa_gemm_f32(ta, tb, m, n, k, pa, pb, pc, acc, ws));
  return done(&a);
}
static napi_value w_test_mm(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 10, &a)) return 0;
  int32_t form = ai(&a, 0), m = ai(&a, 1), n = ai(&a, 2), k = ai(&a, 3), lda = ai(&a, 5), ldb = ai(&a, 7), ldc = ai(&a, 9);
  const float *pa = ap(&a, 4), *pb = ap(&a, 6);
  float *pc = ap(&a, 8);
  RUN(fa_test_mm(form, m, n, k, pa, lda, pb, ldb, pc, ldc));
  return done(&a);
}
static napi_value w_test_vmath(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 4, &a)) return 0;
  int32_t fn = ai(&a, 0), n = ai(&a, 3);
  const float *x = ap(&a, 1);
  float *y = ap(&a, 2);
  RUN(fa_test_vmath(fn, x, y, n));
  return done(&a);
}
static napi_value w_test_widen(napi_env env, napi_callback_info info) {
  call_args a;
  if (!args_of(env, info, 4, &a)) return 0;
  int32_t dt = ai(&a, 0), n = ai(&a, 3);
  const void *src = ap(&a, 1);
  float *dst = ap(&a, 2);
  RUN(fa_test_widen(dt, src, dst, n));
  return done(&a);
}

static const struct {
  const char *name;
  napi_callback fn;
} KERNELS[] = {
  {"fa_forward_scratch_bytes", w_forward_scratch_bytes},
  {"fa_backward_scratch_bytes", w_backward_scratch_bytes},
  {"fa_scale", w_scale},
  {"fa_encode16", w_encode16},
  {"fa_pack_kv", w_pack_kv},
  {"fa_forward_unit", w_forward_unit},
  {"fa_dvec", w_dvec},
  {"fa_backward_unit", w_backward_unit},
  {"fa_kv_scratch_bytes", w_kv_scratch_bytes},
  {"fa_kv_unit", w_kv_unit},
  {"fa_kv_combine", w_kv_combine},
  {"fa_copy_range", w_copy_range},
  {"fa_gemm_ws_bytes", w_gemm_ws_bytes},
  {"fa_gemm_f32", w_gemm_f32},
  {"fa_set_stack", w_set_stack},
  {"fa_problem_bytes", w_problem_bytes},
  {"fa_test_mm", w_test_mm},
  {"fa_test_vmath", w_test_vmath},
  {"fa_test_widen", w_test_widen},
};

/* bind(view: Uint8Array over the memory, from byte 0) -> { fa_forward_unit, ... } */
static napi_value bind(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], obj, fn;
  void *data = 0;
  size_t length = 0, offset = 0;
  int type = -1;
  if (napi_get_cb_info(env, info, &argc, argv, 0, 0) != 0 || argc < 1 ||
      napi_get_typedarray_info(env, argv[0], &type, &length, &data, 0, &offset) != 0 || type != 1 /* uint8 */ || offset != 0 || !data) {
    napi_throw_error(env, "E_ARG", "@fa/wasm native: bind() takes a Uint8Array over the whole engine memory");
    return 0;
  }
  if (napi_create_object(env, &obj) != 0) return 0;
  for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; i++) {
    if (napi_create_function(env, KERNELS[i].name, (size_t)-1, KERNELS[i].fn, data, &fn) != 0) return 0;
    if (napi_set_named_property(env, obj, KERNELS[i].name, fn) != 0) return 0;
  }
  return obj;
}

/* address(view) -> the memory's base address (to check that a grown memory did not move) */
static napi_value address(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], r = 0;
  void *data = 0;
  size_t length = 0, offset = 0;
  int type = -1;
  if (napi_get_cb_info(env, info, &argc, argv, 0, 0) != 0 || argc < 1 ||
      napi_get_typedarray_info(env, argv[0], &type, &length, &data, 0, &offset) != 0) {
    napi_throw_error(env, "E_ARG", "@fa/wasm native: address() takes a typed array");
    return 0;
  }
  napi_create_double(env, (double)(uintptr_t)data - (double)offset, &r);
  return r;
}

int fa_register_direct(napi_env env, napi_value exports); /* direct.c */

FA_API napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  napi_value fn;
  if (!fa_register_direct(env, exports)) return 0;
  if (napi_create_function(env, "bind", (size_t)-1, bind, 0, &fn) != 0 || napi_set_named_property(env, exports, "bind", fn) != 0) return 0;
  if (napi_create_function(env, "address", (size_t)-1, address, 0, &fn) != 0 || napi_set_named_property(env, exports, "address", fn) != 0) return 0;
  napi_value level;
#if defined(__AVX512F__)
  napi_create_int32(env, 4, &level);
#else
  napi_create_int32(env, 3, &level);
#endif
  napi_set_named_property(env, exports, "level", level);
  return exports;
}

FA_API int32_t node_api_module_get_api_version_v1(void) { return 8; }
