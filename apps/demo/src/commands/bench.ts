/**
 * `fa bench` — for now a small throughput table of one engine over a few sequence lengths,
 * with the IO model's traffic for each size (a later issue adds peers, memory and GPU tables).
 */
import { ioModel, parseDType, type AttentionOptions } from '@fa/core';
import { flagHelp, parseCount, parseCounts, parseFlags, type FlagSpec } from '../args.js';
import { BACKEND_CHOICES, pickBackend } from '../engines.js';
import { fmtBytes, fmtMs, type Io } from '../io.js';
import { randomTensor, rng } from '../random.js';

const SPEC: FlagSpec = {
  backend: { type: 'string', value: 'NAME', help: `engine: ${BACKEND_CHOICES.join(', ')} (default auto)` },
  seq: { type: 'string', value: 'T1,T2,...', help: 'sequence lengths (default 128,256,512)' },
  batch: { type: 'string', value: 'B', help: 'sequences (default 1)' },
  heads: { type: 'string', value: 'H', help: 'heads (default 4)' },
  dim: { type: 'string', value: 'D', help: 'head dim (default 64)' },
  dtype: { type: 'string', value: 'f32|f16|bf16', help: 'compute dtype (default f32)' },
  causal: { type: 'boolean', help: 'causal mask' },
  repeat: { type: 'string', value: 'N', help: 'timed runs per size, the median is shown (default 3)' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
};

export const benchHelp = `usage: fa bench [--backend NAME] [--seq T1,T2,...] [--batch B] [--heads H] [--dim D]
                [--dtype f32|f16|bf16] [--causal] [--repeat N]

Times forward and backward over a few sizes and shows the IO model's HBM traffic of the naive
and the tiled schedule. (Placeholder: the full benchmark tables replace it.)

${flagHelp(SPEC)}`;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

export async function benchCommand(args: readonly string[], io: Io): Promise<number> {
  const p = parseFlags('bench', args, SPEC);
  if (p.booleans.has('help')) {
    io.out(benchHelp);
    return 0;
  }
  const get = (n: string, d: number) => (p.strings.has(n) ? parseCount(n, p.strings.get(n)!) : d);
  const sizes = p.strings.has('seq') ? parseCounts('seq', p.strings.get('seq')!) : [128, 256, 512];
  const B = get('batch', 1);
  const H = get('heads', 4);
  const D = get('dim', 64);
  const repeat = get('repeat', 3);
  const dtype = parseDType(p.strings.get('dtype') ?? 'f32', '--dtype');
  const opts: AttentionOptions = p.booleans.has('causal') ? { causal: true } : {};
  const backend = await pickBackend(p.strings.get('backend') ?? 'auto');
  io.out(`fa bench: ${backend.name} (${backend.device}), B=${B} H=${H} D=${D} ${dtype}${opts.causal ? ' causal' : ''}, median of ${repeat}`);
  const head = ['T', 'fwd', 'fwd GFLOP/s', 'bwd', 'bwd GFLOP/s', 'HBM naive', 'HBM tiled'];
  const rows: string[][] = [head];
  const next = rng(1);
  for (const T of sizes) {
    const q = randomTensor([B, T, H, D], dtype, next);
    const k = randomTensor([B, T, H, D], dtype, next);
    const v = randomTensor([B, T, H, D], dtype, next);
    const dO = randomTensor([B, T, H, D], dtype, next);
    const tf: number[] = [];
    const tb: number[] = [];
    for (let r = 0; r < repeat + 1; r++) {
      const t0 = performance.now();
      const f = await backend.forward(q, k, v, opts);
      await backend.read(f.out);
      const t1 = performance.now();
      const g = await backend.backward(q, k, v, f.out, dO, f.lse, opts);
      await backend.read(g.dq);
      const t2 = performance.now();
      for (const t of [f.out, f.lse, g.dq, g.dk, g.dv]) backend.disposeTensor(t);
      if (r > 0) {
        // the first run warms up
        tf.push(t1 - t0);
        tb.push(t2 - t1);
      }
    }
    const m = ioModel({ batch: B, heads: H, tq: T, d: D }, { dtype });
    const div = opts.causal ? 2 : 1;
    const [f, b] = [median(tf), median(tb)];
    rows.push([
      String(T),
      fmtMs(f),
      ((m.forward.flops / div / f) * 1e-6).toFixed(2),
      fmtMs(b),
      ((m.backward.flops / div / b) * 1e-6).toFixed(2),
      fmtBytes(m.forward.naive.traffic.bytes + m.backward.naive.traffic.bytes),
      fmtBytes(m.forward.flash.traffic.bytes + m.backward.flash.traffic.bytes),
    ]);
  }
  const w = head.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  for (const r of rows) io.out('  ' + r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  '));
  io.out('  (HBM: forward + backward traffic of the IO model, 192 KiB on-chip; CPU timings are not GPU figures)');
  return 0;
}
