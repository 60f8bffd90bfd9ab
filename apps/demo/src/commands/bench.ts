/**
 * `fa bench` — throughput and memory tables for any engine: for each engine and size, forward
 * and backward time (median of --repeat runs after a warm-up), FLOP/s, measured peak extra
 * memory against naive attention's S + P, and the IO model's traffic and intensity.
 * GPU engines get their inputs uploaded once and are timed to completion (sync), not including
 * transfers.
 */
import { askSupports, bytesPerElement, describeProblemShapes, ioModel, parseDType, type AttentionBackend, type AttentionOptions, type DType, type Tensor } from '@fa/core';
import { parseCount, parseCounts, parseFlags, type FlagSpec } from '../args.js';
import { flagHelp80 } from '../helptext.js';
import { argError } from '../errors.js';
import { BACKEND_CHOICES } from '../engines.js';
import type { Io } from '../io.js';
import { bufferProbe } from '../memory.js';
import { pickStoryBackend } from '../pick.js';
import { fmtBytes, fmtInt, fmtSeconds } from '../story/format.js';
import { onCpu, onHardwareGpu } from '../story/engine-kind.js';
import { gpuMemoryProbe } from '../story/gpumem.js';
import { wasmMemoryProbe } from '../story/wasmmem.js';
import { makeInputs, type MemoryProbe } from '../story/run.js';
import { fit } from '../story/text.js';

const SPEC: FlagSpec = {
  backend: { type: 'string', value: 'NAME', help: `engine: ${[...BACKEND_CHOICES, 'all'].join(', ')} (default auto; all = every available engine)` },
  seq: { type: 'string', value: 'T1,T2,...', help: 'sequence lengths (default 256,512,1024 on a CPU, 1024,4096,16384 on a GPU)' },
  batch: { type: 'string', value: 'B', help: 'sequences (default 1)' },
  heads: { type: 'string', value: 'H', help: 'heads (default 1)' },
  dim: { type: 'string', value: 'D', help: 'head dim (default 64)' },
  dtype: { type: 'string', value: 'f32|f16|bf16', help: 'compute dtype (default f32, or bf16 where the engine has no f32)' },
  causal: { type: 'boolean', help: 'causal mask' },
  repeat: { type: 'string', value: 'N', help: 'timed runs per size, the median is shown (default 3)' },
  json: { type: 'boolean', help: 'print the rows as JSON' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
};

export const benchHelp = `usage: fa bench [--backend NAME|all] [--seq T1,T2,...] [--batch B] [--heads H]
                [--dim D] [--dtype f32|f16|bf16] [--causal] [--repeat N]
                [--json]

Throughput and memory of an engine (or of every available one) over a few sizes:
forward and backward time (median of --repeat runs after a warm-up) and FLOP/s
(forward 4·B·H·T²·D, half when causal; backward 2.5×), the measured peak extra
memory of each pass against naive attention's S + P, and the IO model's HBM
traffic and arithmetic intensity.

${flagHelp80(SPEC)}`;

export interface BenchRow {
  backend: string;
  device: string;
  dtype: DType;
  B: number;
  H: number;
  T: number;
  D: number;
  causal: boolean;
  forwardSeconds: number;
  backwardSeconds: number;
  forwardRate: number;
  backwardRate: number;
  forwardPeakExtra: number | null;
  backwardPeakExtra: number | null;
  naiveBytes: number;
  hbmNaive: number;
  hbmFlash: number;
  intensityNaive: number;
  intensityFlash: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

type Syncable = { sync?: () => Promise<void>; synchronize?: () => Promise<void> };

async function finish(b: AttentionBackend, t: Tensor): Promise<void> {
  const s = b as unknown as Syncable;
  if (t.kind === 'host') return;
  if (typeof s.sync === 'function') await s.sync.call(b);
  else if (typeof s.synchronize === 'function') await s.synchronize.call(b);
  else await b.read(t);
}

function probe(b: AttentionBackend): MemoryProbe | undefined {
  return b.name === 'cpu' ? bufferProbe() : (wasmMemoryProbe(b) ?? gpuMemoryProbe(b));
}

const bytesOf = (t: Tensor): number => {
  const h = (t as { handle?: { bytes?: unknown } }).handle;
  if (t.kind === 'host') return t.data.byteLength;
  return h && typeof h.bytes === 'number' ? h.bytes : t.shape.reduce((a, x) => a * x, 1) * bytesPerElement(t.dtype);
};

async function benchOne(b: AttentionBackend, T: number, B: number, H: number, D: number, dtype: DType, opts: AttentionOptions, repeat: number): Promise<BenchRow> {
  const inp = makeInputs(T, D, dtype, 1 + T, b.name === 'cpu', B, H);
  const [q, k, v, dO] = [await b.upload(inp.q), await b.upload(inp.k), await b.upload(inp.v), await b.upload(inp.dOut)];
  const tf: number[] = [];
  const tb: number[] = [];
  let fMem: number | null = null;
  let bMem: number | null = null;
  try {
    // memory on every timed run, the largest kept: a host probe measures each call by its level
    // before and after (garbage released meanwhile can only hide memory, never add it)
    const measure = async <R>(call: () => Promise<R>, outputs: (r: R) => number): Promise<{ r: R; extra: number | null; ms: number }> => {
      const p = probe(b);
      if (p?.level) p.settle?.();
      const before = p?.level?.() ?? 0;
      if (p && !p.level) p.begin();
      const t0 = performance.now();
      const r = await call();
      const ms = performance.now() - t0;
      const extra = p ? (p.level ? p.level() - before : p.end()) - outputs(r) : null;
      return { r, extra: extra === null ? null : Math.max(0, extra), ms };
    };
    const maxOf = (a: number | null, x: number | null) => (x === null ? a : Math.max(a ?? 0, x));
    for (let r = 0; r < repeat + 1; r++) {
      const f = await measure(
        async () => {
          const o = await b.forward(q, k, v, opts);
          await finish(b, o.out);
          return o;
        },
        (o) => bytesOf(o.out) + bytesOf(o.lse),
      );
      const g = await measure(
        async () => {
          const o = await b.backward(q, k, v, f.r.out, dO, f.r.lse, opts);
          await finish(b, o.dq);
          return o;
        },
        (o) => bytesOf(o.dq) + bytesOf(o.dk) + bytesOf(o.dv),
      );
      for (const t of [f.r.out, f.r.lse, g.r.dq, g.r.dk, g.r.dv]) b.disposeTensor(t);
      if (r > 0) {
        // the first run warms up
        tf.push(f.ms);
        tb.push(g.ms);
        fMem = maxOf(fMem, f.extra);
        bMem = maxOf(bMem, g.extra);
      }
    }
  } finally {
    for (const t of [q, k, v, dO]) b.disposeTensor(t);
  }
  const m = ioModel({ batch: B, heads: H, tq: T, d: D }, { dtype, schedule: 'fa2' });
  const div = opts.causal ? 2 : 1;
  const [f, bw] = [median(tf) / 1e3, median(tb) / 1e3];
  const e = bytesPerElement(dtype);
  return {
    backend: b.name,
    device: b.device,
    dtype, B, H, T, D,
    causal: opts.causal === true,
    forwardSeconds: f,
    backwardSeconds: bw,
    forwardRate: m.forward.flops / div / f,
    backwardRate: m.backward.flops / div / bw,
    forwardPeakExtra: fMem,
    backwardPeakExtra: bMem,
    naiveBytes: 2 * B * H * T * T * e,
    hbmNaive: m.forward.naive.traffic.bytes + m.backward.naive.traffic.bytes,
    hbmFlash: m.forward.flash.traffic.bytes + m.backward.flash.traffic.bytes,
    intensityNaive: m.forward.naive.intensity,
    intensityFlash: m.forward.flash.intensity,
  };
}

function table(rows: string[][]): string[] {
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => [...r[i]].length)));
  return rows.map((r) => fit('  ' + r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  ')));
}

const gf = (rate: number) => (rate * 1e-9 >= 100 ? (rate * 1e-9).toFixed(0) : (rate * 1e-9).toPrecision(3));

export async function benchCommand(args: readonly string[], io: Io): Promise<number> {
  const p = parseFlags('bench', args, SPEC);
  if (p.booleans.has('help')) {
    io.out(benchHelp);
    return 0;
  }
  const get = (n: string, d: number) => (p.strings.has(n) ? parseCount(n, p.strings.get(n)!) : d);
  const B = get('batch', 1);
  const H = get('heads', 1);
  const D = get('dim', 64);
  const repeat = get('repeat', 3);
  const sizesFlag = p.strings.has('seq') ? parseCounts('seq', p.strings.get('seq')!) : undefined;
  const dtypeFlag = p.strings.has('dtype') ? parseDType(p.strings.get('dtype'), '--dtype') : undefined;
  const opts: AttentionOptions = p.booleans.has('causal') ? { causal: true } : {};
  const name = p.strings.get('backend') ?? 'auto';
  const sizesOf = (b: AttentionBackend) => sizesFlag ?? (onHardwareGpu(b) ? [1024, 4096, 16384] : [256, 512, 1024]);
  // f32 unless the engine declines it (then bf16), at the largest size the engine would run
  const problemOf = (b: AttentionBackend, dtype: DType) => {
    const T = Math.max(1, ...sizesOf(b));
    return describeProblemShapes([B, T, H, D], [B, T, H, D], dtype, opts);
  };
  const dtypeOf = (b: AttentionBackend): DType => dtypeFlag ?? (askSupports(b, problemOf(b, 'f32')).ok ? 'f32' : 'bf16');
  const problemFor = (b: AttentionBackend) => problemOf(b, dtypeOf(b));
  let engines: AttentionBackend[];
  if (name === 'all') {
    const { candidates } = await pickStoryBackend('auto');
    engines = candidates.flatMap((c) => (c.backend && askSupports(c.backend, problemFor(c.backend)).ok ? [c.backend] : []));
  } else {
    // auto: the first engine that computes the problem; a named one that declines is E_UNSUPPORTED
    engines = [(await pickStoryBackend(name, problemFor)).backend];
  }
  const json: BenchRow[] = [];
  for (const b of engines) {
    const dtype = dtypeOf(b);
    const gpu = onHardwareGpu(b);
    const sizes = sizesFlag ?? (gpu ? [1024, 4096, 16384] : [256, 512, 1024]);
    if (sizes.length === 0) throw argError('--seq needs at least one size');
    const rows: BenchRow[] = [];
    for (const T of sizes) rows.push(await benchOne(b, T, B, H, D, dtype, opts, repeat));
    json.push(...rows);
    if (p.booleans.has('json')) continue;
    io.out(fit(`fa bench: ${b.name} (${b.device}), B=${B} H=${H} D=${D} ${dtype}${opts.causal ? ' causal' : ''}, median of ${repeat}`));
    const mem = (x: number | null) => (x === null ? '-' : fmtBytes(x));
    for (const l of table([
      ['T', 'fwd', 'GFLOP/s', 'bwd', 'GFLOP/s', 'mem fwd', 'mem bwd', 'naive S+P'],
      ...rows.map((r) => [fmtInt(r.T), fmtSeconds(r.forwardSeconds), gf(r.forwardRate), fmtSeconds(r.backwardSeconds), gf(r.backwardRate), mem(r.forwardPeakExtra), mem(r.backwardPeakExtra), fmtBytes(r.naiveBytes)]),
    ]))
      io.out(l);
    io.out('  IO model (192 KiB on-chip, FA2 order): fwd + bwd HBM traffic, fwd FLOP/byte');
    for (const l of table([
      ['T', 'HBM naive', 'HBM flash', 'FLOP/B naive', 'FLOP/B flash'],
      ...rows.map((r) => [fmtInt(r.T), fmtBytes(r.hbmNaive), fmtBytes(r.hbmFlash), r.intensityNaive.toFixed(1), r.intensityFlash.toFixed(0)]),
    ]))
      io.out(l);
    io.out(`  mem: measured peak extra memory (${b.name === 'cpu' ? 'ArrayBuffers' : b.name === 'wasm' || b.name === 'native' ? 'WebAssembly memory' : 'device'}), beyond inputs and outputs.`);
    if (onCpu(b)) io.out('  CPU timings are a rough guide, not GPU figures.');
  }
  if (p.booleans.has('json')) io.out(JSON.stringify(json, null, 2));
  return 0;
}
