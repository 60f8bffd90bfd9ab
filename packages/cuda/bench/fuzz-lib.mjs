// Malformed calls straight into the native binding. Every call built here is invalid in at least
// one way, so each must throw (synchronously) a JS Error with a string `code`, and never crash.
// Used by test/fuzz.test.ts (dry-run context, no GPU needed) and bench/fuzz.mjs (on the GPU).

function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

function detachedI32(n) {
  const a = new Int32Array(n);
  structuredClone(a.buffer, { transfer: [a.buffer] });
  return a;
}

/** The valid specs the fuzz mutates: 16-bit and f32, head dims on and off the kernels' multiples of 8. */
export const FUZZ_BASES = [
  { dtype: 'bf16', d: 64 },
  { dtype: 'f32', d: 64 },
  { dtype: 'f16', d: 13 },
  { dtype: 'f32', d: 1 },
  { dtype: 'f32', d: 200 },
];

/** A valid forward/backward spec (B=2, H=4, Hkv=2, d=64 unless given, Tq=5, Tk=7) on `ctx`. */
export function validSpec(ctx, backward = false, { dtype = 'bf16', d = 64 } = {}) {
  const B = 2, H = 4, Hkv = 2, tq = 5, tk = 7;
  const es = dtype === 'f32' ? 4 : 2;
  const nq = B * tq * H * d * es, nk = B * tk * Hkv * d * es, nl = B * H * tq * 4;
  const s = {
    dtype, B, H, Hkv, d, totalQ: B * tq, totalK: B * tk, varlen: false,
    cuSeqlensQ: Int32Array.from([0, tq, 2 * tq]), cuSeqlensK: Int32Array.from([0, tk, 2 * tk]),
    alibi: null, scale: 0.125, softcap: 0, windowLeft: -1, windowRight: -1, deterministic: false,
    q: ctx.alloc(nq), k: ctx.alloc(nk), v: ctx.alloc(nk), out: ctx.alloc(nq), lse: ctx.alloc(nl),
  };
  if (backward) Object.assign(s, { dout: ctx.alloc(nq), dq: ctx.alloc(nq), dk: ctx.alloc(nk), dv: ctx.alloc(nk) });
  return s;
}

function describe(v) {
  if (v === null || v === undefined || typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (typeof v === 'string') return JSON.stringify(v);
  if (ArrayBuffer.isView(v)) return `${v.constructor.name}(${v.length})`;
  return typeof v;
}

/** The KV-cache specs the fuzz mutates: the tensor-core kernel (bf16, d = 64) and the FFMA one (f32, odd d). */
export const KV_FUZZ_BASES = [
  { dtype: 'bf16', d: 64 },
  { dtype: 'f32', d: 13 },
  { dtype: 'f16', d: 6 },
];

/**
 * A valid KV-cache spec on `ctx`: B=2, H=4, Hkv=2, d=64 unless given, Tq=2, one appended token, a
 * paged cache of 6 blocks of 4 rows (3 per sequence), lengths [5, 2], lengths and table also on
 * the device.
 */
export function validKvSpec(ctx, { dtype = 'bf16', d = 64 } = {}) {
  const B = 2, H = 4, Hkv = 2, tq = 2, tnew = 1, bs = 4, nb = 6, mb = 3;
  const es = dtype === 'f32' ? 4 : 2;
  const nq = B * tq * H * d * es, nc = nb * bs * Hkv * d * es, nn = B * tnew * Hkv * d * es;
  return {
    dtype, B, H, Hkv, d, tq, tnew, paged: true, blockSize: bs, numBlocks: nb, maxBlocksPerSeq: mb,
    cacheSeqlens: Int32Array.from([5, 2]), blockTable: Int32Array.from([0, 1, 2, 3, 4, 5]),
    cacheSeqlensBuf: ctx.alloc(B * 4), blockTableBuf: ctx.alloc(B * mb * 4),
    alibi: null, scale: 0.125, softcap: 0, windowLeft: -1, windowRight: 0,
    q: ctx.alloc(nq), kCache: ctx.alloc(nc), vCache: ctx.alloc(nc), kNew: ctx.alloc(nn), vNew: ctx.alloc(nn), out: ctx.alloc(nq), lse: ctx.alloc(B * H * tq * 4),
  };
}

// Per base: the dtypes of another element size, and other head dims (byte sizes then disagree),
// but never a head dim whose bytes per row equal the base's in some dtype (f32 d = 1 and bf16 d = 2
// describe the same buffers: mutating both fields would make a valid call).
const otherDtypes = (b) => (b.dtype === 'f32' ? ['f16', 'bf16'] : ['f32']);
function otherDims(b) {
  const rowBytes = b.d * (b.dtype === 'f32' ? 4 : 2);
  return [b.d + 1, b.d === 1 ? 8 : b.d - 1, Math.min(256, b.d * 2 + 8), 3, 7, 12, 100].filter((x) => x !== b.d && 2 * x !== rowBytes && 4 * x !== rowBytes);
}

/**
 * Runs `count` malformed calls against `ctx` (a native Context) and returns
 * { calls, threw, notErrors, badCodes, resolved, kvCacheChanged } — a healthy binding has
 * threw === calls, and (on a GPU) the KV caches the refused cache calls named are unchanged.
 * `other` is a second Context (for foreign-buffer cases).
 */
export async function fuzzBinding(binding, ctx, other, count = 10000, seed = 1) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const bases = FUZZ_BASES.map((b) => ({ ...b, fwd: validSpec(ctx, false, b), bwd: validSpec(ctx, true, b) }));
  const { fwd } = bases[0];
  const disposed = ctx.alloc(64); disposed.dispose();
  const foreign = other.alloc(fwd.q.bytes);
  const wrong = ctx.alloc(fwd.q.bytes + 2);
  const fake = Object.create(Object.getPrototypeOf(fwd.q));
  const thrower = new Proxy({}, { get() { throw new Error('getter boom'); } });
  const junk = [undefined, null, NaN, Infinity, -Infinity, -1, 1.5, 2 ** 31, 2 ** 53, 1e300, '3', '', {}, [], () => 0, true, Symbol('x'), 10n, thrower, new Float64Array(3), new DataView(new ArrayBuffer(8))];
  // a second buffer over q's bytes (Context.wrap): a call that writes it while reading q is refused
  const overQ = ctx.wrap(fwd.q.address, fwd.q.bytes);
  const badBuffers = [disposed, foreign, wrong, fake, {}, new Uint16Array(4), null, undefined, 0, ctx, thrower];
  // field -> invalid values (each makes the call invalid on its own, for every base)
  const badFields = {
    dtype: ['F16', '', 'bfloat16', 'f64', 1, null, undefined, {}, thrower],
    B: [0, -1, 1.5, NaN, Infinity, 65536, 3, '2', null, undefined, 2 ** 53, thrower],
    H: [0, -4, 3, 8, 65536, NaN, '4', null, 2 ** 40],
    Hkv: [0, 3, 8, -1, 1, NaN, '2', null],
    d: [0, 264, 1e9, -64, 1.5, NaN, '64', null],
    f32Path: ['fast', 'FFMA', '', 1, null, {}, thrower],
    totalQ: [-1, 11, 9, 2 ** 31, 1.5, NaN, null, '10'],
    totalK: [-1, 15, 13, 2 ** 31, 1.5, NaN, null],
    varlen: ['yes', 1, {}, null],
    cuSeqlensQ: [[0, 5, 10], new Float32Array([0, 5, 10]), new Uint32Array([0, 5, 10]), new Int32Array([0, 10]), new Int32Array([0, 5, 10, 10]),
      Int32Array.from([0, 11, 10]), Int32Array.from([1, 5, 10]), Int32Array.from([0, 5, 9]), Int32Array.from([0, 4, 10]), detachedI32(3), Int32Array.from([0, 2 ** 31 - 1, 10]), null, undefined, thrower],
    cuSeqlensK: [new Int32Array([0, 7]), Int32Array.from([0, 8, 14]), Int32Array.from([0, 7, 15]), Int32Array.from([0, -7, 14]), detachedI32(3), new Int16Array(3), null],
    alibi: [new Float32Array(7), new Float32Array(9), new Float64Array(8), [0.1, 0.2], Float32Array.from([0, 0, 0, NaN, 0, 0, 0, 0]), Float32Array.from([Infinity, 0, 0, 0, 0, 0, 0, 0]), 'x', 5, thrower],
    scale: [NaN, Infinity, -Infinity, '1', null, undefined, 1e39, {}, thrower],
    softcap: [-1, NaN, Infinity, '0', undefined, null, 1e39],
    windowLeft: [-2, 1.5, 2 ** 31, NaN, '3', undefined, null, -1e9],
    windowRight: [-2, 0.5, 2 ** 32, NaN, undefined, {}],
    deterministic: ['yes', 1, null, {}],
    q: badBuffers, k: badBuffers, v: badBuffers, out: badBuffers, lse: badBuffers,
  };
  const bwdOnly = { dout: badBuffers, dq: badBuffers, dk: badBuffers, dv: badBuffers };
  const fields = Object.keys(badFields);
  // KV-cache calls, per base: field -> invalid values (each makes the call invalid on its own)
  const pat = (n, k) => Uint16Array.from({ length: n / 2 }, (_, i) => (i * 31 + k) & 0x3fff);
  const kvBases = [];
  for (const base of KV_FUZZ_BASES) {
    const kv = validKvSpec(ctx, base);
    const kvWrong = ctx.alloc(kv.kCache.bytes - 2);
    const bad = {
      dtype: ['', null, 1, 'F32', thrower, ...otherDtypes(base)],
      B: [0, -1, 1.5, 3, 65536, null, thrower],
      H: [0, 3, 65536, null, 8],
      Hkv: [0, 3, -1, 4],
      d: [0, 264, null, 1.5, ...otherDims(base)],
      tq: [-1, 1.5, 2 ** 31, 3, null],
      tnew: [-1, 2, 2 ** 31, 0, null],
      paged: ['yes', 1, false],
      blockSize: [0, -4, 2 ** 31, 3, 8, null],
      numBlocks: [0, 7, -1, 2 ** 31, null],
      maxBlocksPerSeq: [0, 2, 2 ** 31, 1e9],
      cacheSeqlens: [Int32Array.from([5]), Int32Array.from([-1, 2]), Int32Array.from([12, 2]), Int32Array.from([5, 12]), new Float32Array([5, 2]), [5, 2], detachedI32(2), null, thrower],
      blockTable: [new Int32Array(5), Int32Array.from([0, 6, 2, 3, 4, 5]), Int32Array.from([0, 1, 2, -1, 4, 5]), Int32Array.from([0, 1, 2, 3, 99, 5].map((x, i) => (i === 3 ? 2 ** 31 - 1 : x))), new Float32Array(6), null, thrower],
      cacheSeqlensBuf: [disposed, foreign, wrong, fake, {}, 5, kv.blockTableBuf],
      blockTableBuf: [disposed, foreign, kv.cacheSeqlensBuf, {}, 'x'],
      alibi: [new Float32Array(7), Float32Array.from({ length: 8 }, (_, i) => (i === 3 ? NaN : 0.1)), [0.1], 5],
      scale: [NaN, Infinity, '1', null, undefined, 1e39],
      softcap: [-1, NaN, Infinity, undefined, 1e39],
      windowLeft: [-2, 1.5, 2 ** 31, NaN, undefined],
      windowRight: [-2, 0.5, 2 ** 32, null],
      q: badBuffers, kCache: [...badBuffers, kvWrong], vCache: [...badBuffers, kvWrong], kNew: [...badBuffers, null], vNew: [...badBuffers, undefined], out: badBuffers, lse: badBuffers,
    };
    // invalid only together: two sequences appending into one row, or a buffer the call writes aliasing another
    const pairs = [
      { cacheSeqlens: Int32Array.from([5, 1]), blockTable: Int32Array.from([0, 1, 2, 1, 4, 5]) },
      { cacheSeqlens: Int32Array.from([1, 5]), blockTable: Int32Array.from([3, 4, 5, 0, 3, 2]) },
      { out: kv.q }, { lse: kv.cacheSeqlensBuf }, { vCache: kv.kCache }, { kNew: kv.kCache }, { out: kv.kCache }, { q: kv.vCache },
      { out: ctx.wrap(kv.q.address, kv.q.bytes) }, { q: ctx.wrap(kv.vCache.address, kv.vCache.bytes) },
      { tnew: 0 }, { paged: false, blockTable: null, blockTableBuf: null },
    ];
    if (!ctx.dryRun) {  // a pattern in the caches, to check at the end that no refused call wrote them
      await ctx.upload(kv.kCache, pat(kv.kCache.bytes, 1));
      await ctx.upload(kv.vCache, pat(kv.vCache.bytes, 2));
      await ctx.upload(kv.cacheSeqlensBuf, kv.cacheSeqlens);
      await ctx.upload(kv.blockTableBuf, kv.blockTable);
    }
    kvBases.push({ ...base, kv, kvWrong, bad, fields: Object.keys(bad), pairs });
  }
  const stats = { calls: 0, threw: 0, notErrors: 0, badCodes: 0, resolved: 0, kvCacheChanged: 0, samples: new Map(), resolvedCalls: [] };
  let what = '';
  const record = (e) => {
    stats.threw++;
    if (!(e instanceof Error)) stats.notErrors++;
    else if (typeof e.code !== 'string' && !/boom/.test(e.message)) stats.badCodes++;
    const key = e instanceof Error ? `${e.code ?? e.name}` : typeof e;
    stats.samples.set(key, (stats.samples.get(key) ?? 0) + 1);
  };
  const call = async (f) => {
    stats.calls++;
    let p;
    try {
      p = f();
    } catch (e) {
      record(e);
      return;
    }
    // a malformed call that did not throw synchronously: it must at least reject
    try {
      await p;
      stats.resolved++;
      if (stats.resolvedCalls.length < 10) stats.resolvedCalls.push(what);
    } catch (e) {
      record(e);
    }
  };
  // per base: see otherDtypes / otherDims
  const badFor = (b, f) => {
    if (f === 'dtype') return [...badFields.dtype, ...otherDtypes(b)];
    if (f === 'd') return [...badFields.d, ...otherDims(b)];
    return badFields[f] ?? bwdOnly[f];
  };
  for (let i = 0; i < count; i++) {
    const kind = r();
    if (kind < 0.25) {
      const kb = pick(kvBases);
      const s = { ...kb.kv };
      what = `kvForward ${kb.dtype} d=${kb.d}:`;
      if (r() < 0.1) {
        const pair = pick(kb.pairs);
        Object.assign(s, pair);
        what += ` pair ${Object.keys(pair).join('+')}`;
      } else {
        const nmut = 1 + Math.floor(r() * 3);
        for (let m = 0; m < nmut; m++) {
          const f = pick(kb.fields);
          s[f] = pick(kb.bad[f]);
          what += ` ${f}=${describe(s[f])}`;
        }
      }
      await call(() => ctx.kvForward(s));
    } else if (kind < 0.7) {
      const backward = r() < 0.4;
      const b = pick(bases);
      const s = { ...(backward ? b.bwd : b.fwd) };
      const nmut = 1 + Math.floor(r() * 3);
      what = `${backward ? 'backward' : 'forward'} ${b.dtype} d=${b.d}:`;
      for (let m = 0; m < nmut; m++) {
        const f = backward && r() < 0.25 ? pick(Object.keys(bwdOnly)) : pick(fields);
        s[f] = pick(badFor(b, f));
        what += ` ${f}=${describe(s[f])}`;
      }
      // aliasing an output with an input (in a backward, out is an input: alias dq instead)
      if (r() < 0.05) {
        if (backward) s.dq = s.q;
        else s.out = s.q;
        what += backward ? ' dq=q' : ' out=q';
      } else if (r() < 0.03 && b === bases[0]) {  // the same bytes through another buffer
        if (backward) s.dq = overQ;
        else s.out = overQ;
        what += backward ? ' dq=wrap(q)' : ' out=wrap(q)';
      }
      await call(() => (backward ? ctx.backward(s) : ctx.forward(s)));
    } else if (kind < 0.8) {
      const bad = pick([null, 42, 'spec', [], () => 0, thrower, undefined, Symbol('s')]);
      what = `spec ${describe(bad)}`;
      await call(() => (r() < 0.4 ? ctx.forward(bad) : r() < 0.5 ? ctx.backward(bad) : ctx.kvForward(bad)));
    } else if (kind < 0.93) {
      const up = r() < 0.5;
      what = up ? 'upload' : 'download';
      const buf = r() < 0.5 ? fwd.q : pick(badBuffers);
      const data = buf === fwd.q ? pick([new Uint16Array(fwd.q.bytes / 2 + 1), new Uint8Array(3), new Float32Array(1), new DataView(new ArrayBuffer(fwd.q.bytes)), [1, 2], 'x', null, undefined, (() => { const a = new Uint16Array(fwd.q.bytes / 2); structuredClone(a.buffer, { transfer: [a.buffer] }); return a; })()])
        : new Uint16Array(fwd.q.bytes / 2);
      await call(() => (up ? ctx.upload(buf, data) : ctx.download(buf, data)));
    } else if (kind < 0.96) {
      // wrapping a caller's memory: refused in a dry run too (type, alignment, size); on a GPU also
      // memory that is not CUDA memory, and a range past its allocation
      const real = ctx.dryRun ? [] : [[256n * 12345n, 64], [fwd.q.address, 2 ** 39]];
      const [addr, bytes] = pick([[1n, 64], [fwd.q.address + 16n, 64], [-256n, 64], [2n ** 64n, 64], [256, 64], ['0x100', 64], [null, 8], [undefined, 8],
        [0n, 64], [fwd.q.address, -1], [fwd.q.address, 1.5], [fwd.q.address, 2 ** 41], [fwd.q.address, '8'], [fwd.q.address, thrower], [thrower, 8], ...real]);
      what = `wrap(${describe(addr)}, ${describe(bytes)})`;
      await call(() => ctx.wrap(addr, bytes));
    } else {
      what = 'alloc';
      await call(() => ctx.alloc(pick([-1, NaN, 1.5, 2 ** 41, '8', undefined, null, {}, Infinity, -0.5, thrower])));
    }
  }
  // new DeviceBuffer() from JS is refused
  what = 'new DeviceBuffer()';
  await call(() => new (Object.getPrototypeOf(fwd.q).constructor)(1));
  if (!ctx.dryRun) {
    const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
    for (const { kv } of kvBases) {
      const kc = new Uint16Array(kv.kCache.bytes / 2);
      const vc = new Uint16Array(kv.vCache.bytes / 2);
      await ctx.download(kv.kCache, kc);
      await ctx.download(kv.vCache, vc);
      if (!same(kc, pat(kv.kCache.bytes, 1)) || !same(vc, pat(kv.vCache.bytes, 2))) stats.kvCacheChanged = 1;
    }
  }
  for (const base of bases) for (const b of [...Object.values(base.fwd), ...Object.values(base.bwd)]) if (b && typeof b.dispose === 'function') b.dispose();
  for (const { kv, kvWrong } of kvBases) {
    for (const b of Object.values(kv)) if (b && typeof b.dispose === 'function') b.dispose();
    kvWrong.dispose();
  }
  foreign.dispose();
  wrong.dispose();
  overQ.dispose();
  return stats;
}
