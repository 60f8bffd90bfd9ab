/*
 * The model ops' direct entries of the native addon (src/model-ops.ts): unlike the kernels bind()
 * returns, which take byte offsets into the engine's memory, these take the caller's typed arrays
 * and run on their memory in place, so a model op costs no copy in or out. Each entry checks that
 * every array has the kind and at least the length its sizes need (the TypeScript layer has
 * already given the user an FAError for a bad call; this only keeps a wrong call from touching
 * memory it does not own) and runs under the default floating-point control bits.
 *
 * The product runs on up to `threads` threads: the calling one and helper threads the addon
 * starts on first use (pthread_create from the process's C library; -nostdlib links nothing).
 * Each takes a block of C's rows (or, for short products, of its columns) through fa_gemm_f32_ld
 * with its own slice of the workspace; between products the helpers spin for ~0.1 ms, then sleep
 * on a futex. One product
 * at a time uses the helpers; a second thread calling meanwhile computes its own on its own.
 */
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
#include "napi.h"

int32_t fa_gemm_ws_bytes(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k);
void fa_gemm_f32_ld(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc,
                    int32_t accumulate, float *ws);
void fa_add_bias_f32(float *c, const float *bias, int32_t m, int32_t n);
void fa_gelu_f32(const float *x, float *y, int32_t n, int32_t tanh_form);
void fa_gelu_backward_f32(const float *x, const float *dy, float *dx, int32_t n, int32_t tanh_form, int32_t accumulate);
void fa_layer_norm_f32(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd, int32_t rows, int32_t cols, float eps);
void fa_layer_norm_backward_f32(const float *x, const float *mean, const float *rstd, const float *w, const float *dy, float *dx, float *dw, float *db, int32_t rows, int32_t cols,
                                double *ws);
double fa_cross_entropy_f32(const float *logits, const int32_t *targets, float *lse, int32_t rows, int32_t classes, int32_t ignore);
void fa_cross_entropy_backward_f32(const float *logits, const float *lse, const int32_t *targets, float *dlogits, int32_t rows, int32_t classes, int32_t ignore, float scale);
void fa_adamw_f32(float *p, const float *g, float *m, float *v, int32_t n, float b1, float b2, float eps, float decay, float step_size, float inv_sqrt_bc2);
void fa_sum_rows_f32(const float *x, float *out, int32_t rows, int32_t cols, int32_t accumulate, float *ws);
void fa_rms_norm_f32(const float *x, const float *w, float *y, float *rstd, int32_t rows, int32_t cols, float eps);
void fa_rms_norm_backward_f32(const float *x, const float *rstd, const float *w, const float *dy, float *dx, float *dw, int32_t rows, int32_t cols, double *ws);
void fa_silu_f32(const float *x, const float *gate, float *y, int32_t n);
void fa_dropout_f32(const float *x, float *y, int32_t n, uint32_t threshold, uint32_t k0, uint32_t k1, uint32_t offset, float scale, int32_t accumulate);
void fa_silu_backward_f32(const float *x, const float *gate, const float *dy, float *dx, float *dgate, int32_t n, int32_t accumulate);
void fa_rotary_f32(const float *x, float *y, const float *cos_t, const float *sin_t, int32_t batch, int32_t seq, int32_t heads, int32_t dim, int32_t rotary_dim,
                   int32_t offset, int32_t interleaved, int32_t inverse);

/* ---- arguments ---- */
#define MAX_ARGS 12
typedef struct {
  napi_env env;
  size_t argc;
  napi_value argv[MAX_ARGS];
  const char *bad; /* the first problem found, or 0 */
} dargs;

static int dargs_of(napi_env env, napi_callback_info info, size_t want, dargs *a) {
  a->env = env;
  a->argc = MAX_ARGS;
  a->bad = 0;
  if (napi_get_cb_info(env, info, &a->argc, a->argv, 0, 0) != 0 || a->argc < want) {
    napi_throw_error(env, "E_ARG", "@fa/wasm native: a model op was called with too few arguments");
    return 0;
  }
  return 1;
}
static int32_t di(dargs *a, size_t k) {
  int32_t v = 0;
  if (napi_get_value_int32(a->env, a->argv[k], &v) != 0 && !a->bad) a->bad = "an integer argument is not a number";
  return v;
}
static double dd(dargs *a, size_t k) {
  double v = 0;
  if (napi_get_value_double(a->env, a->argv[k], &v) != 0 && !a->bad) a->bad = "a number argument is not a number";
  return v;
}
/* A typed array of `kind` with at least `need` elements; null/undefined gives 0 when `nullable`. */
static void *darr(dargs *a, size_t k, int kind, int64_t need, int nullable) {
  napi_valuetype t = napi_undefined;
  if (napi_typeof(a->env, a->argv[k], &t) != 0) t = napi_undefined;
  if (t == napi_null || t == napi_undefined) {
    if (!nullable && !a->bad) a->bad = "a required array is missing";
    return 0;
  }
  int type = -1;
  size_t length = 0, offset = 0;
  void *data = 0;
  if (napi_get_typedarray_info(a->env, a->argv[k], &type, &length, &data, 0, &offset) != 0 || type != kind) {
    if (!a->bad) a->bad = "an array argument has the wrong kind";
    return 0;
  }
  if (need < 0 || (int64_t)length < need) {
    if (!a->bad) a->bad = "an array argument is shorter than its sizes need";
    return 0;
  }
  return data;
}
static int64_t prod(int32_t x, int32_t y) { return (int64_t)x * (int64_t)y; }

static napi_value finish(dargs *a) {
  napi_value u = 0;
  if (a->bad) napi_throw_error(a->env, "E_ARG", a->bad);
  else napi_get_undefined(a->env, &u);
  return u;
}

#define MXCSR_CONTROL 0xffc0u
#define MXCSR_DEFAULT 0x1f80u
#define RUN_OP(call)                                                                 \
  do {                                                                               \
    if (!a.bad) {                                                                    \
      const unsigned csr_ = _mm_getcsr();                                            \
      if ((csr_ & MXCSR_CONTROL) != MXCSR_DEFAULT) _mm_setcsr((csr_ & ~MXCSR_CONTROL) | MXCSR_DEFAULT); \
      call;                                                                          \
      if ((csr_ & MXCSR_CONTROL) != MXCSR_DEFAULT) _mm_setcsr(csr_);                 \
    }                                                                                \
  } while (0)

/* ---- the thread pool of the product ---- */
typedef unsigned long fa_pthread_t;
int pthread_create(fa_pthread_t *thread, const void *attr, void *(*start)(void *), void *arg);

#define MAX_THREADS 64
static long sys_futex(volatile int32_t *addr, int op, int32_t val) {
  long r;
  register void *timeout __asm__("r10") = 0;
  __asm__ volatile("syscall" : "=a"(r) : "0"(202L), "D"(addr), "S"((long)op), "d"((long)val), "r"(timeout) : "rcx", "r11", "memory");
  return r;
}
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129

typedef struct {
  int32_t ta, tb, m, n, k, lda, ldb, ldc, acc;
  const float *a, *b, *bias;
  float *c, *ws;
} gemm_part;

static struct {
  volatile int32_t busy;    /* a product holds the helpers */
  volatile int32_t gen;     /* bumped to start the helpers */
  volatile int32_t pending; /* helpers still computing */
  int32_t helpers;          /* started so far */
  int32_t parts;            /* parts of the current product (part 0 is the caller's) */
  gemm_part part[MAX_THREADS];
} pool;

static void run_part(const gemm_part *p) {
  if (p->m <= 0 || p->n <= 0) return;
  fa_gemm_f32_ld(p->ta, p->tb, p->m, p->n, p->k, p->a, p->lda, p->b, p->ldb, p->c, p->ldc, p->acc, p->ws);
  if (p->bias)
    for (int32_t r = 0; r < p->m; r++) fa_add_bias_f32(p->c + (size_t)r * p->ldc, p->bias, 1, p->n);
}

/*
 * Waits until *addr differs from `old`: spinning for up to SPIN_TICKS of the time-stamp counter
 * first (about 0.1 ms), then asleep on the futex. A training step's products follow each other
 * within that window, and a sleeping core (a VM's halted vCPU above all) takes up to a millisecond
 * to wake: measured, a 512³ product on 2 threads ran at 1-thread speed when its helper slept.
 */
#define SPIN_TICKS (1u << 18)
static int32_t wait_change(volatile int32_t *addr, int32_t old) {
  int32_t v;
  const unsigned long long t0 = __rdtsc();
  while ((v = __atomic_load_n(addr, __ATOMIC_ACQUIRE)) == old) {
    if (__rdtsc() - t0 > SPIN_TICKS) {
      sys_futex(addr, FUTEX_WAIT_PRIVATE, old);
    } else {
      _mm_pause();
    }
  }
  return v;
}

static void *helper(void *arg) {
  const int32_t id = (int32_t)(intptr_t)arg;
  _mm_setcsr(MXCSR_DEFAULT);
  int32_t seen = 0;
  for (;;) {
    const int32_t g = wait_change(&pool.gen, seen);
    seen = g;
    if (id < pool.parts) run_part(&pool.part[id]);
    if (__atomic_sub_fetch(&pool.pending, 1, __ATOMIC_ACQ_REL) == 0) sys_futex(&pool.pending, FUTEX_WAKE_PRIVATE, 1);
  }
  return 0;
}

/* Bytes of one part's workspace, rounded to cache lines. */
static int64_t part_ws(int32_t ta, int32_t tb, int32_t m, int32_t n, int32_t k) { return ((int64_t)fa_gemm_ws_bytes(ta, tb, m, n, k) + 63) & ~63LL; }

/* How the product splits: into `*parts` blocks of rows (by_rows) or columns of `*step` each. */
static void plan(int32_t m, int32_t n, int32_t k, int32_t threads, int32_t *parts, int32_t *by_rows, int32_t *step) {
  const double flops = 2.0 * m * n * k;
  int32_t t = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
  while (t > 1 && flops / t < 8e6) t--; /* below ~8 MFLOP a part, waking a helper costs more than it saves */
  *by_rows = m >= 16 * t || m >= n;
  const int32_t len = *by_rows ? m : n, align = *by_rows ? 8 : 32;
  int32_t s = (len + t - 1) / t;
  s = (s + align - 1) / align * align;
  *step = s < 1 ? 1 : s;
  *parts = (len + *step - 1) / *step;
  if (*parts < 1) *parts = 1;
}

/* gemmWsBytes(ta, tb, m, n, k, threads) -> bytes the workspace of gemm() needs (64 of slack included) */
static napi_value d_gemm_ws_bytes(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 6, &a)) return 0;
  const int32_t ta = di(&a, 0), tb = di(&a, 1), m = di(&a, 2), n = di(&a, 3), k = di(&a, 4), threads = di(&a, 5);
  if (a.bad) return finish(&a);
  int32_t parts, by_rows, step;
  plan(m, n, k, threads, &parts, &by_rows, &step);
  const int64_t bytes = 64 + parts * part_ws(ta, tb, by_rows ? step : m, by_rows ? n : step, k);
  napi_value r = 0;
  napi_create_double(env, (double)bytes, &r);
  return r;
}

/* gemm(ta, tb, m, n, k, a, b, c, accumulate, bias | null, ws: Float32Array, threads) */
static napi_value d_gemm(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 12, &a)) return 0;
  const int32_t ta = di(&a, 0), tb = di(&a, 1), m = di(&a, 2), n = di(&a, 3), k = di(&a, 4), acc = di(&a, 8), threads = di(&a, 11);
  if (!a.bad && (m < 0 || n < 0 || k < 0)) a.bad = "gemm: negative sizes";
  const float *pa = darr(&a, 5, FA_NAPI_FLOAT32, prod(m, k), 0), *pb = darr(&a, 6, FA_NAPI_FLOAT32, prod(k, n), 0);
  float *pc = darr(&a, 7, FA_NAPI_FLOAT32, prod(m, n), 0);
  const float *bias = darr(&a, 9, FA_NAPI_FLOAT32, n, 1);
  int32_t parts = 1, by_rows = 1, step = m;
  if (!a.bad) plan(m, n, k, threads, &parts, &by_rows, &step);
  const int64_t each = a.bad ? 0 : part_ws(ta, tb, by_rows ? step : m, by_rows ? n : step, k);
  float *ws = darr(&a, 10, FA_NAPI_FLOAT32, (64 + parts * each + 3) / 4, 0);
  if (a.bad || m == 0 || n == 0) return finish(&a);
  float *ws0 = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  const int32_t lda = ta ? m : k, ldb = tb ? k : n;
  gemm_part part[MAX_THREADS];
  for (int32_t i = 0; i < parts; i++) {
    const int32_t lo = i * step, len = (by_rows ? m : n) - lo < step ? (by_rows ? m : n) - lo : step;
    gemm_part *p = &part[i];
    p->ta = ta, p->tb = tb, p->k = k, p->lda = lda, p->ldb = ldb, p->ldc = n, p->acc = acc;
    p->ws = (float *)((char *)ws0 + i * each);
    if (by_rows) {
      p->m = len, p->n = n;
      p->a = ta ? pa + lo : pa + (size_t)lo * lda, p->b = pb, p->c = pc + (size_t)lo * n, p->bias = bias;
    } else {
      p->m = m, p->n = len;
      p->a = pa, p->b = tb ? pb + (size_t)lo * ldb : pb + lo, p->c = pc + lo, p->bias = bias ? bias + lo : 0;
    }
  }
  RUN_OP({
    int32_t expected = 0;
    if (parts > 1 && __atomic_compare_exchange_n(&pool.busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      while (pool.helpers < parts - 1) {
        fa_pthread_t t;
        if (pthread_create(&t, 0, helper, (void *)(intptr_t)(pool.helpers + 1)) != 0) break;
        pool.helpers++;
      }
      const int32_t use = pool.helpers + 1 < parts ? pool.helpers + 1 : parts;
      for (int32_t i = 0; i < parts; i++) pool.part[i] = part[i];
      pool.parts = use;
      __atomic_store_n(&pool.pending, pool.helpers, __ATOMIC_RELEASE);
      __atomic_add_fetch(&pool.gen, 1, __ATOMIC_ACQ_REL);
      sys_futex(&pool.gen, FUTEX_WAKE_PRIVATE, MAX_THREADS);
      run_part(&part[0]);
      for (int32_t i = use; i < parts; i++) run_part(&part[i]); /* parts no helper could take */
      int32_t left;
      while ((left = __atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE)) != 0) wait_change(&pool.pending, left);
      __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
    } else {
      for (int32_t i = 0; i < parts; i++) run_part(&part[i]);
    }
  });
  return finish(&a);
}

/* gelu(x, y, tanh) */
static napi_value d_gelu(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 3, &a)) return 0;
  size_t n = 0;
  { int type; void *d; napi_get_typedarray_info(env, a.argv[0], &type, &n, &d, 0, 0); }
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, (int64_t)n, 0);
  float *y = darr(&a, 1, FA_NAPI_FLOAT32, (int64_t)n, 0);
  const int32_t tanh_form = di(&a, 2);
  if (!a.bad && n > 0x7fffffff) a.bad = "gelu: more than 2^31 - 1 values";
  RUN_OP(fa_gelu_f32(x, y, (int32_t)n, tanh_form));
  return finish(&a);
}

/* geluBackward(x, dy, dx, tanh, accumulate) */
static napi_value d_gelu_backward(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 5, &a)) return 0;
  size_t n = 0;
  { int type; void *d; napi_get_typedarray_info(env, a.argv[0], &type, &n, &d, 0, 0); }
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, (int64_t)n, 0), *dy = darr(&a, 1, FA_NAPI_FLOAT32, (int64_t)n, 0);
  float *dx = darr(&a, 2, FA_NAPI_FLOAT32, (int64_t)n, 0);
  const int32_t tanh_form = di(&a, 3), acc = di(&a, 4);
  if (!a.bad && n > 0x7fffffff) a.bad = "geluBackward: more than 2^31 - 1 values";
  RUN_OP(fa_gelu_backward_f32(x, dy, dx, (int32_t)n, tanh_form, acc));
  return finish(&a);
}

/* layerNorm(x, w | null, b | null, y, mean, rstd, rows, cols, eps) */
static napi_value d_layer_norm(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 9, &a)) return 0;
  const int32_t rows = di(&a, 6), cols = di(&a, 7);
  const float eps = (float)dd(&a, 8);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, prod(rows, cols), 0), *w = darr(&a, 1, FA_NAPI_FLOAT32, cols, 1), *b = darr(&a, 2, FA_NAPI_FLOAT32, cols, 1);
  float *y = darr(&a, 3, FA_NAPI_FLOAT32, prod(rows, cols), 0), *mean = darr(&a, 4, FA_NAPI_FLOAT32, rows, 0), *rstd = darr(&a, 5, FA_NAPI_FLOAT32, rows, 0);
  RUN_OP(fa_layer_norm_f32(x, w, b, y, mean, rstd, rows, cols, eps));
  return finish(&a);
}

/* layerNormBackward(x, mean, rstd, w | null, dy, dx | null, dw | null, db | null, rows, cols, ws: Float64Array) */
static napi_value d_layer_norm_backward(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 11, &a)) return 0;
  const int32_t rows = di(&a, 8), cols = di(&a, 9);
  const int64_t n = prod(rows, cols);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, n, 0), *mean = darr(&a, 1, FA_NAPI_FLOAT32, rows, 0), *rstd = darr(&a, 2, FA_NAPI_FLOAT32, rows, 0);
  const float *w = darr(&a, 3, FA_NAPI_FLOAT32, cols, 1), *dy = darr(&a, 4, FA_NAPI_FLOAT32, n, 0);
  float *dx = darr(&a, 5, FA_NAPI_FLOAT32, n, 1), *dw = darr(&a, 6, FA_NAPI_FLOAT32, cols, 1), *db = darr(&a, 7, FA_NAPI_FLOAT32, cols, 1);
  double *ws = darr(&a, 10, FA_NAPI_FLOAT64, 2 * (int64_t)cols, 0);
  RUN_OP(fa_layer_norm_backward_f32(x, mean, rstd, w, dy, dx, dw, db, rows, cols, ws));
  return finish(&a);
}

/* crossEntropy(logits, targets, lse, rows, classes, ignore) -> the counted rows' summed loss */
static napi_value d_cross_entropy(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 6, &a)) return 0;
  const int32_t rows = di(&a, 3), classes = di(&a, 4), ignore = di(&a, 5);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, prod(rows, classes), 0);
  const int32_t *t = darr(&a, 1, FA_NAPI_INT32, rows, 0);
  float *lse = darr(&a, 2, FA_NAPI_FLOAT32, rows, 0);
  for (int32_t r = 0; !a.bad && r < rows; r++)
    if (t[r] != ignore && (t[r] < 0 || t[r] >= classes)) a.bad = "crossEntropy: a target is not a class";
  double loss = 0;
  RUN_OP(loss = fa_cross_entropy_f32(x, t, lse, rows, classes, ignore));
  if (a.bad) return finish(&a);
  napi_value r = 0;
  napi_create_double(env, loss, &r);
  return r;
}

/* crossEntropyBackward(logits, lse, targets, dlogits, rows, classes, ignore, scale) */
static napi_value d_cross_entropy_backward(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 8, &a)) return 0;
  const int32_t rows = di(&a, 4), classes = di(&a, 5), ignore = di(&a, 6);
  const float scale = (float)dd(&a, 7);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, prod(rows, classes), 0), *lse = darr(&a, 1, FA_NAPI_FLOAT32, rows, 0);
  const int32_t *t = darr(&a, 2, FA_NAPI_INT32, rows, 0);
  float *g = darr(&a, 3, FA_NAPI_FLOAT32, prod(rows, classes), 0);
  for (int32_t r = 0; !a.bad && r < rows; r++)
    if (t[r] != ignore && (t[r] < 0 || t[r] >= classes)) a.bad = "crossEntropyBackward: a target is not a class";
  RUN_OP(fa_cross_entropy_backward_f32(x, lse, t, g, rows, classes, ignore, scale));
  return finish(&a);
}

/* adamw(p, g, m, v, b1, b2, eps, decay, stepSize, invSqrtBc2) */
static napi_value d_adamw(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 10, &a)) return 0;
  size_t n = 0;
  { int type; void *d; napi_get_typedarray_info(env, a.argv[0], &type, &n, &d, 0, 0); }
  float *p = darr(&a, 0, FA_NAPI_FLOAT32, (int64_t)n, 0);
  const float *g = darr(&a, 1, FA_NAPI_FLOAT32, (int64_t)n, 0);
  float *m = darr(&a, 2, FA_NAPI_FLOAT32, (int64_t)n, 0), *v = darr(&a, 3, FA_NAPI_FLOAT32, (int64_t)n, 0);
  const float b1 = (float)dd(&a, 4), b2 = (float)dd(&a, 5), eps = (float)dd(&a, 6), decay = (float)dd(&a, 7), ss = (float)dd(&a, 8), ib = (float)dd(&a, 9);
  if (!a.bad && n > 0x7fffffff) a.bad = "adamw: more than 2^31 - 1 values";
  RUN_OP(fa_adamw_f32(p, g, m, v, (int32_t)n, b1, b2, eps, decay, ss, ib));
  return finish(&a);
}

/* sumRows(x, out, rows, cols, accumulate, ws: Float32Array of 3 cols + 2) */
static napi_value d_sum_rows(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 6, &a)) return 0;
  const int32_t rows = di(&a, 2), cols = di(&a, 3), acc = di(&a, 4);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, prod(rows, cols), 0);
  float *out = darr(&a, 1, FA_NAPI_FLOAT32, cols, 0), *ws = darr(&a, 5, FA_NAPI_FLOAT32, 3 * (int64_t)cols + 2, 0);
  RUN_OP(fa_sum_rows_f32(x, out, rows, cols, acc, ws));
  return finish(&a);
}

/* rmsNorm(x, w | null, y, rstd, rows, cols, eps) */
static napi_value d_rms_norm(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 7, &a)) return 0;
  const int32_t rows = di(&a, 4), cols = di(&a, 5);
  const float eps = (float)dd(&a, 6);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, prod(rows, cols), 0), *w = darr(&a, 1, FA_NAPI_FLOAT32, cols, 1);
  float *y = darr(&a, 2, FA_NAPI_FLOAT32, prod(rows, cols), 0), *rstd = darr(&a, 3, FA_NAPI_FLOAT32, rows, 0);
  RUN_OP(fa_rms_norm_f32(x, w, y, rstd, rows, cols, eps));
  return finish(&a);
}

/* rmsNormBackward(x, rstd, w | null, dy, dx | null, dw | null, rows, cols, ws: Float64Array) */
static napi_value d_rms_norm_backward(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 9, &a)) return 0;
  const int32_t rows = di(&a, 6), cols = di(&a, 7);
  const int64_t n = prod(rows, cols);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, n, 0), *rstd = darr(&a, 1, FA_NAPI_FLOAT32, rows, 0), *w = darr(&a, 2, FA_NAPI_FLOAT32, cols, 1);
  const float *dy = darr(&a, 3, FA_NAPI_FLOAT32, n, 0);
  float *dx = darr(&a, 4, FA_NAPI_FLOAT32, n, 1), *dw = darr(&a, 5, FA_NAPI_FLOAT32, cols, 1);
  double *ws = darr(&a, 8, FA_NAPI_FLOAT64, cols, 0);
  RUN_OP(fa_rms_norm_backward_f32(x, rstd, w, dy, dx, dw, rows, cols, ws));
  return finish(&a);
}

/* silu(x, gate | null, y) */
static napi_value d_silu(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 3, &a)) return 0;
  size_t n = 0;
  { int type; void *d; napi_get_typedarray_info(env, a.argv[0], &type, &n, &d, 0, 0); }
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, (int64_t)n, 0), *gate = darr(&a, 1, FA_NAPI_FLOAT32, (int64_t)n, 1);
  float *y = darr(&a, 2, FA_NAPI_FLOAT32, (int64_t)n, 0);
  if (!a.bad && n > 0x7fffffff) a.bad = "silu: more than 2^31 - 1 values";
  RUN_OP(fa_silu_f32(x, gate, y, (int32_t)n));
  return finish(&a);
}

/* siluBackward(x, gate | null, dy, dx, dgate | null, accumulate) */
static napi_value d_silu_backward(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 6, &a)) return 0;
  size_t n = 0;
  { int type; void *d; napi_get_typedarray_info(env, a.argv[0], &type, &n, &d, 0, 0); }
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, (int64_t)n, 0), *gate = darr(&a, 1, FA_NAPI_FLOAT32, (int64_t)n, 1), *dy = darr(&a, 2, FA_NAPI_FLOAT32, (int64_t)n, 0);
  float *dx = darr(&a, 3, FA_NAPI_FLOAT32, (int64_t)n, 0), *dgate = darr(&a, 4, FA_NAPI_FLOAT32, (int64_t)n, 1);
  const int32_t acc = di(&a, 5);
  if (!a.bad && n > 0x7fffffff) a.bad = "siluBackward: more than 2^31 - 1 values";
  if (!a.bad && dgate && !gate) a.bad = "siluBackward: dgate without a gate";
  RUN_OP(fa_silu_backward_f32(x, gate, dy, dx, dgate, (int32_t)n, acc));
  return finish(&a);
}

/* rotary(x, y, cos, sin, batch, seq, heads, dim, rotaryDim, offset, interleaved, inverse) */
static napi_value d_rotary(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 12, &a)) return 0;
  const int32_t batch = di(&a, 4), seq = di(&a, 5), heads = di(&a, 6), dim = di(&a, 7), rd = di(&a, 8), offset = di(&a, 9), inter = di(&a, 10), inv = di(&a, 11);
  if (!a.bad && (batch < 0 || seq < 0 || heads < 0 || dim < 0 || rd < 0 || rd > dim || (rd & 1) || offset < 0)) a.bad = "rotary: bad sizes";
  const int64_t n = a.bad ? 0 : prod(batch, seq) * heads * dim, tab = a.bad ? 0 : (int64_t)(offset + seq) * (rd / 2);
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, n, 0);
  float *y = darr(&a, 1, FA_NAPI_FLOAT32, n, 0);
  const float *ct = darr(&a, 2, FA_NAPI_FLOAT32, tab, 0), *st = darr(&a, 3, FA_NAPI_FLOAT32, tab, 0);
  RUN_OP(fa_rotary_f32(x, y, ct, st, batch, seq, heads, dim, rd, offset, inter, inv));
  return finish(&a);
}

/* dropout(x, y, threshold, k0, k1, offset, scale, accumulate) (integers as doubles: they reach 2^32 - 1) */
static napi_value d_dropout(napi_env env, napi_callback_info info) {
  dargs a;
  if (!dargs_of(env, info, 8, &a)) return 0;
  size_t n = 0;
  { int type; void *d; napi_get_typedarray_info(env, a.argv[0], &type, &n, &d, 0, 0); }
  const float *x = darr(&a, 0, FA_NAPI_FLOAT32, (int64_t)n, 0);
  float *y = darr(&a, 1, FA_NAPI_FLOAT32, (int64_t)n, 0);
  const uint32_t thr = (uint32_t)dd(&a, 2), k0 = (uint32_t)dd(&a, 3), k1 = (uint32_t)dd(&a, 4), off = (uint32_t)dd(&a, 5);
  const float scale = (float)dd(&a, 6);
  const int32_t acc = di(&a, 7);
  if (!a.bad && n > 0x7fffffff) a.bad = "dropout: more than 2^31 - 1 values";
  RUN_OP(fa_dropout_f32(x, y, (int32_t)n, thr, k0, k1, off, scale, acc));
  return finish(&a);
}

static const struct {
  const char *name;
  napi_callback fn;
} OPS[] = {
  {"gemmWsBytes", d_gemm_ws_bytes},
  {"gemm", d_gemm},
  {"gelu", d_gelu},
  {"geluBackward", d_gelu_backward},
  {"layerNorm", d_layer_norm},
  {"layerNormBackward", d_layer_norm_backward},
  {"crossEntropy", d_cross_entropy},
  {"crossEntropyBackward", d_cross_entropy_backward},
  {"adamw", d_adamw},
  {"sumRows", d_sum_rows},
  {"rmsNorm", d_rms_norm},
  {"rmsNormBackward", d_rms_norm_backward},
  {"silu", d_silu},
  {"siluBackward", d_silu_backward},
  {"rotary", d_rotary},
  {"dropout", d_dropout},
};

/* exports.ops = { gemm, gelu, ... } */
int fa_register_direct(napi_env env, napi_value exports) {
  napi_value obj, fn;
  if (napi_create_object(env, &obj) != 0) return 0;
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) {
    if (napi_create_function(env, OPS[i].name, (size_t)-1, OPS[i].fn, 0, &fn) != 0) return 0;
    if (napi_set_named_property(env, obj, OPS[i].name, fn) != 0) return 0;
  }
  return napi_set_named_property(env, exports, "ops", obj) == 0;
}
