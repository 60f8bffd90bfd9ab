/**
 * `fa demo` — for now a small end-to-end check (a later issue turns it into the guided 100K-token
 * story): random inputs, forward and backward on the chosen engine, the float64 reference on the
 * same (rounded) inputs, the errors, the timing and what the IO model says about the schedule.
 */
import { ioModel, parseDType, referenceBackward, UNIT_ROUNDOFF, type AttentionOptions } from '@fa/core';
import { flagHelp, parseCount, parseFlags, parseNumber, type FlagSpec } from '../args.js';
import { compare, values } from '../compare.js';
import { BACKEND_CHOICES, pickBackend } from '../engines.js';
import { fmtBytes, fmtMs, fmtShape, type Io } from '../io.js';
import { randomTensor, rng } from '../random.js';

const SPEC: FlagSpec = {
  backend: { type: 'string', value: 'NAME', help: `engine: ${BACKEND_CHOICES.join(', ')} (default auto)` },
  batch: { type: 'string', value: 'B', help: 'sequences (default 1)' },
  seq: { type: 'string', value: 'T', help: 'tokens per sequence (default 256)' },
  heads: { type: 'string', value: 'H', help: 'query heads (default 4)' },
  'kv-heads': { type: 'string', value: 'HKV', help: 'key/value heads, divides H (default H)' },
  dim: { type: 'string', value: 'D', help: 'head dim (default 64)' },
  dtype: { type: 'string', value: 'f32|f16|bf16', help: 'compute dtype (default f32)' },
  causal: { type: 'boolean', help: 'causal mask' },
  softcap: { type: 'string', value: 'C', help: 'tanh soft-capping' },
  seed: { type: 'string', value: 'N', help: 'random seed (default 1)' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
};

export const demoHelp = `usage: fa demo [--backend NAME] [--batch B] [--seq T] [--heads H] [--kv-heads HKV] [--dim D]
               [--dtype f32|f16|bf16] [--causal] [--softcap C] [--seed N]

A small end-to-end run: random inputs, forward and backward on the engine, compared with the
float64 reference. (Placeholder: the guided long-context demo replaces it.)

${flagHelp(SPEC)}`;

export async function demoCommand(args: readonly string[], io: Io): Promise<number> {
  const p = parseFlags('demo', args, SPEC);
  if (p.booleans.has('help')) {
    io.out(demoHelp);
    return 0;
  }
  const get = (n: string, d: number) => (p.strings.has(n) ? parseCount(n, p.strings.get(n)!) : d);
  const B = get('batch', 1);
  const T = get('seq', 256);
  const H = get('heads', 4);
  const Hkv = get('kv-heads', H);
  const D = get('dim', 64);
  const seed = p.strings.has('seed') ? parseCount('seed', p.strings.get('seed')!, 0) : 1;
  const dtype = parseDType(p.strings.get('dtype') ?? 'f32', '--dtype');
  const opts: { causal?: boolean; softcap?: number } = {};
  if (p.booleans.has('causal')) opts.causal = true;
  if (p.strings.has('softcap')) opts.softcap = parseNumber('softcap', p.strings.get('softcap')!);

  const next = rng(seed);
  const q = randomTensor([B, T, H, D], dtype, next);
  const k = randomTensor([B, T, Hkv, D], dtype, next);
  const v = randomTensor([B, T, Hkv, D], dtype, next);
  const dOut = randomTensor([B, T, H, D], dtype, next);

  const backend = await pickBackend(p.strings.get('backend') ?? 'auto');
  io.out(`fa demo: ${backend.name} (${backend.device}), q ${fmtShape(q.shape)} k/v ${fmtShape(k.shape)} ${dtype}${opts.causal ? ' causal' : ''}${opts.softcap ? ` softcap ${opts.softcap}` : ''}`);
  const t0 = performance.now();
  const fwd = await backend.forward(q, k, v, opts as AttentionOptions);
  const out = await backend.read(fwd.out);
  const lse = await backend.read(fwd.lse);
  const t1 = performance.now();
  const g = await backend.backward(q, k, v, fwd.out, dOut, fwd.lse, opts as AttentionOptions);
  const [dq, dk, dv] = [await backend.read(g.dq), await backend.read(g.dk), await backend.read(g.dv)];
  const t2 = performance.now();

  const model = ioModel({ batch: B, heads: H, tq: T, d: D }, { dtype });
  const causalDiv = opts.causal ? 2 : 1;
  const gf = (flops: number, ms: number) => `${((flops / causalDiv / ms) * 1e-6).toFixed(2)} GFLOP/s`;
  io.out(`  forward  ${fmtMs(t1 - t0)} (${gf(model.forward.flops, t1 - t0)}), backward ${fmtMs(t2 - t1)} (${gf(model.backward.flops, t2 - t1)})`);

  const ref = referenceBackward(q, k, v, dOut, opts as AttentionOptions);
  const tol = dtype === 'f32' ? 1e-5 : 4 * UNIT_ROUNDOFF[dtype];
  let worst = 0;
  for (const [name, x, r] of [
    ['out', values(out), ref.out],
    ['lse', values(lse), ref.lse],
    ['dq', values(dq), ref.dq],
    ['dk', values(dk), ref.dk],
    ['dv', values(dv), ref.dv],
  ] as const) {
    const e = compare(x, r);
    worst = Math.max(worst, e.mismatched > 0 ? Infinity : e.rel);
    io.out(`  ${name.padEnd(4)} relative error ${e.rel.toExponential(2)}, max abs error ${e.maxAbs.toExponential(2)}${e.mismatched ? `, ${e.mismatched} non-finite mismatches` : ''}`);
  }
  io.out(`  against the float64 reference: ${worst <= tol ? 'within' : 'OUTSIDE'} ${tol.toExponential(0)} (${dtype === 'f32' ? "DESIGN.md's float32 bound" : `a few units of ${dtype} roundoff`})`);
  const f = model.forward;
  io.out(
    `  IO model (${fmtBytes(model.sramBytes)} on-chip, Bc=${model.blocks.bc}, Br=${model.blocks.br}): forward HBM traffic naive ${fmtBytes(f.naive.traffic.bytes)} vs tiled ${fmtBytes(f.flash.traffic.bytes)}; intensity ${f.naive.intensity.toFixed(1)} vs ${f.flash.intensity.toFixed(1)} FLOP/B`,
  );
  for (const t of [fwd.out, fwd.lse, g.dq, g.dk, g.dv]) backend.disposeTensor(t);
  return 0;
}
