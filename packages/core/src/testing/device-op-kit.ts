/**
 * The model-op kit on an engine whose model ops take device tensors (DESIGN.md "Model ops"):
 * the same gemm and layer-op cases as op-kit.ts and layer-op-kit.ts, each run through an adapter
 * that gives the cases the synchronous, Float32Array-based HostModelOps they are written against
 * and turns each call into the engine's device call: an array seen first is uploaded (a copy
 * taken at the call), an array an earlier call wrote stays on the device as that call's output,
 * integer targets become index tensors, and after the case every written array is read back
 * (crossEntropy's loss and count too) before the comparison with the float64 reference. An op
 * the engine does not offer is reported as skipped, with the reason.
 */
import type { AttentionBackend } from '../backend.js';
import type { DeviceIndexTensor } from '../kvcache.js';
import { FAError } from '../errors.js';
import type { GemmCall, HostModelOps } from '../ops/model-ops.js';
import { MODEL_OP_NAMES } from '../ops/model-ops.js';
import { tensor, type Tensor } from '../tensor.js';
import { createRng, randomValues } from './random.js';
import { LAYER_OP_TOLERANCE, layerOpCases, relError, type LayerOpCase } from './layer-op-kit.js';
import { GEMM_TOLERANCE, gemmCases, gemmError, gemmReference, type GemmCase, type OpCaseResult } from './op-kit.js';

/** Device model ops: each op of MODEL_OP_NAMES an engine offers, taking tensors (crossEntropy: a `loss` [2] tensor). */
export type DeviceModelOpsLike = { readonly engine: string } & Partial<Record<(typeof MODEL_OP_NAMES)[number], (call: never) => Promise<void>>>;

type Op = (typeof MODEL_OP_NAMES)[number];

/** The HostModelOps face of a device engine for one case; flush() runs the calls and reads back. */
class DeferredOps {
  readonly engine: string;
  readonly kernel = 'device (through the kit adapter)';
  private chain: Promise<void> = Promise.resolve();
  private readonly onDevice = new Map<Float32Array, Tensor>();
  private readonly written = new Set<Float32Array>();
  private readonly willWrite = new Set<Float32Array>();
  private readonly results: { r: { loss: number; count: number }; t: () => Tensor }[] = [];
  private readonly temps: (Tensor | DeviceIndexTensor)[] = [];
  missing: Op | undefined;

  constructor(private readonly be: AttentionBackend, private readonly ops: DeviceModelOpsLike) {
    this.engine = ops.engine;
    for (const name of MODEL_OP_NAMES) {
      (this as unknown as Record<string, unknown>)[name] = (call: Record<string, unknown>) => this.call(name, call);
    }
  }

  /** Output fields of each op: the arrays it writes. */
  private static readonly OUTS: Record<Op, readonly string[]> = {
    gemm: ['c'], gelu: ['y'], geluBackward: ['dx'], layerNorm: ['y', 'mean', 'rstd'], layerNormBackward: ['dx', 'dweight', 'dbias'],
    crossEntropy: ['lse'], crossEntropyBackward: ['dlogits'], adamw: ['param', 'm', 'v'], sumRows: ['out'], rmsNorm: ['y', 'rstd'],
    rmsNormBackward: ['dx', 'dweight'], silu: ['y'], siluBackward: ['dx', 'dgate'], rotary: ['y'], dropout: ['y'],
  };

  private call(name: Op, call: Record<string, unknown>): unknown {
    const op = this.ops[name];
    if (typeof op !== 'function') {
      this.missing ??= name;
      throw new FAError('E_UNSUPPORTED', `${this.engine} has no device ${name}`);
    }
    // snapshots now (the case may reuse its arrays), device tensors in call order
    const outs = DeferredOps.OUTS[name];
    const plan: [string, unknown][] = Object.entries(call).map(([k, v]) => {
      if (v instanceof Float32Array) {
        // (an earlier call may not have run yet: what it will write counts as on the device)
        const known = this.onDevice.has(v) || this.willWrite.has(v);
        const isOut = outs.includes(k);
        // (an array an earlier call wrote lives on the device: its host copy is stale until the flush)
        return [k, { arr: v, copy: known ? null : Float32Array.from(v), out: isOut }];
      }
      if (v instanceof Int32Array) return [k, { ints: Int32Array.from(v) }];
      return [k, v];
    });
    for (const [k, v] of Object.entries(call)) if (v instanceof Float32Array && outs.includes(k)) this.willWrite.add(v);
    const result = name === 'crossEntropy' ? { loss: Number.NaN, count: Number.NaN } : undefined;
    let lossT: Tensor | undefined;
    this.chain = this.chain.then(async () => {
      const dcall: Record<string, unknown> = {};
      for (const [k, v] of plan) {
        const x = v as { arr?: Float32Array; copy?: Float32Array | null; out?: boolean; ints?: Int32Array };
        if (x && typeof x === 'object' && x.arr) {
          let t = this.onDevice.get(x.arr);
          if (!t || x.copy) {
            t = await this.be.upload(tensor(x.copy ?? Float32Array.from(x.arr), [x.arr.length]));
            this.temps.push(t);
            this.onDevice.set(x.arr, t);
          }
          if (x.out) this.written.add(x.arr);
          dcall[k] = t;
        } else if (x && typeof x === 'object' && x.ints) {
          const t = await this.be.uploadIndex!(x.ints);
          this.temps.push(t);
          dcall[k] = t;
        } else {
          dcall[k] = v;
        }
      }
      if (result) {
        lossT = await this.be.upload(tensor(new Float32Array(2), [2]));
        this.temps.push(lossT);
        dcall.loss = lossT;
      }
      await (op as (c: unknown) => Promise<void>).call(this.ops, dcall);
    });
    if (result) {
      this.results.push({ r: result, t: () => lossT! });
      return result;
    }
    return undefined;
  }

  /** Runs the calls; reads every written array (and crossEntropy's results) back; frees the tensors. */
  async flush(): Promise<void> {
    try {
      await this.chain;
      for (const arr of this.written) arr.set((await this.be.read(this.onDevice.get(arr)!)).data as Float32Array);
      for (const { r, t } of this.results) {
        const d = (await this.be.read(t())).data as Float32Array;
        r.loss = d[0];
        r.count = d[1];
      }
    } finally {
      for (const t of this.temps) this.be.disposeTensor(t);
    }
  }
}

export interface DeviceOpSummary {
  readonly engine: string;
  readonly passed: number;
  readonly failed: number;
  readonly skipped: number;
  readonly results: readonly (OpCaseResult & { skipped?: string })[];
}

/** Runs the gemm and layer-op cases on a device engine's model ops. */
export async function runDeviceOpConformance(
  be: AttentionBackend,
  ops: DeviceModelOpsLike,
  options: { gemm?: readonly GemmCase[]; layer?: readonly LayerOpCase[]; onResult?: (r: OpCaseResult & { skipped?: string }) => void } = {},
): Promise<DeviceOpSummary> {
  const results: (OpCaseResult & { skipped?: string })[] = [];
  const push = (r: OpCaseResult & { skipped?: string }) => {
    results.push(r);
    options.onResult?.(r);
  };
  const gcases = options.gemm ?? gemmCases();
  for (let i = 0; i < gcases.length; i++) {
    const c = gcases[i];
    const rng = createRng(100 + i);
    const { M, N, K } = c;
    const a = randomValues(rng, M * K), b = randomValues(rng, K * N), c0 = randomValues(rng, M * N);
    const out = Float32Array.from(c0);
    const call: GemmCall = { transA: c.transA, transB: c.transB, M, N, K, a, b, c: out, accumulate: c.accumulate };
    const ref = gemmReference({ ...call, c: c0 });
    push(await runOne(be, ops, c.name, (d) => d.gemm(call), () => {
      const error = gemmError(out, ref);
      return { error, tol: GEMM_TOLERANCE, what: 'c' };
    }));
  }
  const lcases = options.layer ?? layerOpCases();
  for (let i = 0; i < lcases.length; i++) {
    const c = lcases[i];
    let outs: ReturnType<LayerOpCase['run']> = [];
    push(await runOne(be, ops, c.name, (d) => { outs = c.run(d, createRng(5000 + i)); }, () => {
      let worst = 0, what = '';
      for (const o of outs) {
        const err = relError(o.got, o.ref, o.floor);
        if (!(err <= worst)) [worst, what] = [err, o.what];
      }
      return { error: worst, tol: LAYER_OP_TOLERANCE, what };
    }));
  }
  const skipped = results.filter((r) => r.skipped).length;
  const failed = results.filter((r) => !r.pass).length;
  return { engine: ops.engine, passed: results.length - failed - skipped, failed, skipped, results };
}

async function runOne(be: AttentionBackend, ops: DeviceModelOpsLike, name: string, run: (d: HostModelOps) => void, compare: () => { error: number; tol: number; what: string }): Promise<OpCaseResult & { skipped?: string }> {
  const d = new DeferredOps(be, ops);
  try {
    run(d as unknown as HostModelOps);
    await d.flush();
  } catch (e) {
    if (d.missing) return { name, pass: true, error: 0, skipped: `${ops.engine} has no device ${d.missing} yet` };
    return { name, pass: false, error: Number.NaN, message: `threw: ${e instanceof Error ? e.message : String(e)}` };
  }
  const { error, tol, what } = compare();
  const pass = error <= tol;
  return { name, pass, error, message: pass ? undefined : `${what}: error ${error.toExponential(3)} > ${tol}` };
}
