// One benchmark measurement in a fresh process (so peak memory is this measurement's alone):
//   node bench/case.mjs '{"engine":"fa"|"tfjs","T":2048,"D":64,"causal":false,"reps":3,"phase":"fwd"|"fwdbwd"}'
// Prints one JSON line: the best time over `reps` of the forward (phase "fwd") or of forward
// then backward (phase "fwdbwd"), and the peak RSS above the baseline (inputs allocated and the
// engine warmed up), from the kernel's high-water mark (VmHWM, reset through
// /proc/self/clear_refs at the baseline).
import { readFileSync, writeFileSync } from 'node:fs';

const c = JSON.parse(process.argv[2]);
const { engine, T, D, causal } = c;
const scale = 1 / Math.sqrt(D);

function status(key) {
  const m = readFileSync('/proc/self/status', 'utf8').match(new RegExp(`${key}:\\s+(\\d+) kB`));
  return m ? Number(m[1]) * 1024 : NaN;
}
function resetPeak() {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}
function fill(a, seed) {
  let s = seed >>> 0 || 1;
  for (let i = 0; i < a.length; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    a[i] = (s / 2 ** 32 - 0.5) * 2;
  }
  return a;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function measure(run, reps) {
  await sleep(50);
  const base = status('VmRSS');
  const canReset = resetPeak();
  let best = Infinity;
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    await run();
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  const peak = status('VmHWM');
  return { seconds: best, peakExtra: canReset ? Math.max(0, peak - base) : NaN };
}

const result = { engine, T, D, causal };

if (engine === 'fa') {
  const { allocFloat32, createCpuBackend, tensor } = await import('../dist/index.js');
  const be = await createCpuBackend();
  result.device = be.device;
  const mk = (n, seed) => fill(allocFloat32(n), seed);
  const shape = [1, T, 1, D];
  const q = tensor(mk(T * D, 1), shape, 'f32');
  const k = tensor(mk(T * D, 2), shape, 'f32');
  const v = tensor(mk(T * D, 3), shape, 'f32');
  const dO = tensor(mk(T * D, 4), shape, 'f32');
  const opts = { causal };
  // warm up: threads started, kernels compiled (on a small problem)
  await be.warm();
  {
    const w = Math.min(T, 512);
    const s = (t) => tensor(t.data.subarray(0, w * D), [1, w, 1, D], 'f32');
    const f = await be.forward(s(q), s(k), s(v), opts);
    await be.backward(s(q), s(k), s(v), f.out, s(dO), f.lse, opts);
  }
  if (c.phase === 'fwd') {
    result.fwd = await measure(async () => {
      await be.forward(q, k, v, opts);
    }, c.reps);
  } else {
    result.fwdbwd = await measure(async () => {
      const r = await be.forward(q, k, v, opts);
      await be.backward(q, k, v, r.out, dO, r.lse, opts);
    }, c.reps);
  }
  await be.dispose();
} else {
  const { register } = await import('node:module');
  register('./esm-resolve.mjs', import.meta.url);
  const tf = await import('@tensorflow/tfjs-core');
  await import('@tensorflow/tfjs-backend-cpu');
  await import('@tensorflow/tfjs-core/dist/register_all_gradients.js'); // for tf.grads
  // tfjs prints a hint to install tfjs-node; keep the output to our JSON line
  const log = console.log;
  console.log = () => {};
  console.warn = () => {};
  await tf.setBackend('cpu');
  await tf.ready();
  console.log = log;
  result.device = `tfjs-core ${tf.version_core} cpu backend`;
  const mk = (n, seed) => tf.tensor2d(fill(new Float32Array(n), seed), [n / D, D]);
  const q = mk(T * D, 1);
  const k = mk(T * D, 2);
  const v = mk(T * D, 3);
  const dO = mk(T * D, 4);
  // additive causal mask (0 where visible, −∞ above the diagonal), built before the baseline
  const bias = causal ? tf.tidy(() => tf.where(tf.cast(tf.linalg.bandPart(tf.ones([T, T]), -1, 0), 'bool'), tf.zeros([T, T]), tf.fill([T, T], -Infinity))) : null;
  const attnWith = (b) => (q, k, v) => {
    let s = tf.mul(tf.matMul(q, k, false, true), scale);
    if (b) s = tf.add(s, b);
    return tf.matMul(tf.softmax(s), v);
  };
  const attn = attnWith(bias);
  const grads = tf.grads(attn);
  // warm up on a small unmasked problem (same kernels)
  {
    const w = Math.min(T, 256);
    const s = (t) => tf.slice(t, [0, 0], [w, D]);
    const small = attnWith(null);
    tf.tidy(() => small(s(q), s(k), s(v)).dataSync());
    tf.tidy(() => tf.grads(small)([s(q), s(k), s(v)], s(dO)).forEach((g) => g.dataSync()));
  }
  if (c.phase === 'fwd') {
    result.fwd = await measure(async () => {
      tf.tidy(() => attn(q, k, v).dataSync());
    }, c.reps);
  } else {
    result.fwdbwd = await measure(async () => {
      tf.tidy(() => grads([q, k, v], dO).forEach((g) => g.dataSync()));
    }, c.reps);
  }
}
console.log(JSON.stringify(result));
