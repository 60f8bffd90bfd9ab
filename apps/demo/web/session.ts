/**
 * One run of the story in a browser: inputs, forward, backward, the float64 check on sampled
 * rows. The same function runs on the page's main thread (WebGPU) and inside the engine Web Worker.
 * Results are plain data (they cross postMessage).
 */
import type { AttentionBackend } from '@fa/core';
import { checkRows, sampleRows, type RowsCheck } from '../src/story/exact.js';
import { gpuMemoryProbe } from '../src/story/gpumem.js';
import { wasmMemoryProbe } from '../src/story/wasmmem.js';
import { AttentionRun, makeInputs, type Progress } from '../src/story/run.js';

export interface RunRequest {
  readonly T: number;
  readonly D: number;
  readonly causal: boolean;
  readonly backward: boolean;
  readonly seed: number;
  readonly rows: number;
  /** Expected FLOP/s (from an earlier run), for chunking and the progress estimate. */
  readonly rate?: number;
}

export interface PassReport {
  readonly seconds: number;
  readonly flops: number;
  readonly chunks: number;
  readonly peakExtra: number | null;
}

export interface RunReport {
  readonly engine: { readonly name: string; readonly device: string };
  readonly request: RunRequest;
  readonly forward: PassReport;
  readonly backward: PassReport | null;
  readonly check: RowsCheck;
  readonly memoryMethod: string | null;
}

export async function runOnBackend(backend: AttentionBackend, req: RunRequest, progress: (p: Progress) => void): Promise<RunReport> {
  const inputs = makeInputs(req.T, req.D, 'f32', req.seed, false);
  const run = new AttentionRun(backend, inputs, req.causal);
  const rate = req.rate ?? (backend.name === 'cpu' ? 2e8 : backend.name === 'wasm' ? 5e9 : 1e9);
  const probe = () => (backend.name === 'cpu' ? undefined : (wasmMemoryProbe(backend) ?? gpuMemoryProbe(backend)));
  try {
    const p1 = probe();
    const fwd = await run.forward({ predictedSeconds: run.forwardFlops / rate, progress, chunkSeconds: 0.5, ...(p1 ? { memory: p1 } : {}) });
    let bwd: Awaited<ReturnType<AttentionRun['backward']>> | undefined;
    if (req.backward) {
      const p2 = probe();
      bwd = await run.backward({ predictedSeconds: (2.5 * run.forwardFlops) / rate, progress, chunkSeconds: 0.5, ...(p2 ? { memory: p2 } : {}) });
    }
    const rows = sampleRows(req.T, Math.min(req.rows, req.T), req.seed + 7);
    const check = checkRows({ q: inputs.q, k: inputs.k, v: inputs.v, dOut: inputs.dOut, causal: req.causal, out: fwd.out, lse: fwd.lse, ...(bwd ? { dq: bwd.dq } : {}) }, rows);
    const pr = probe();
    return {
      engine: { name: backend.name, device: backend.device },
      request: req,
      forward: { seconds: fwd.seconds, flops: fwd.flops, chunks: fwd.chunks, peakExtra: fwd.peakExtra ?? null },
      backward: bwd ? { seconds: bwd.seconds, flops: bwd.flops, chunks: bwd.chunks, peakExtra: bwd.peakExtra ?? null } : null,
      check,
      memoryMethod: pr ? pr.method : null,
    };
  } finally {
    run.dispose();
  }
}
