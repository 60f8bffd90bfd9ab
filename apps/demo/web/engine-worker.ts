/**
 * A CPU engine in a Web Worker, off the page's main thread (which stays responsive):
 *   - wasm: @fa/wasm, WebAssembly SIMD; with its own worker threads when the page is
 *     cross-origin isolated (SharedArrayBuffer), otherwise one thread, and its device says why;
 *   - cpu: @fa/core's TypeScript engine, single-threaded here (a page has no worker_threads).
 * Protocol: { type: 'start', engine } → { type: 'ready', device } or { type: 'failed', message };
 * then { type: 'run', id, req } → 'progress' messages and one 'result' or 'error';
 * { type: 'train', id, seconds } → 'trainstep' messages and one 'trained' or 'error' (part 9: a
 * GPT on this engine's attention and model ops, src/story/train.ts).
 */
import { resolveBackend, type AttentionBackend } from '@fa/core';
import { runOnBackend, type RunRequest } from './session.js';
import { runTraining, TRAIN_DEFAULTS } from '../src/story/train.js';

type Msg = { type: 'start'; engine: 'wasm' | 'cpu' } | { type: 'run'; id: number; req: RunRequest } | { type: 'train'; id: number; seconds: number };

interface WorkerScope {
  postMessage(m: unknown): void;
  onmessage: ((e: MessageEvent<Msg>) => void) | null;
}
const scope = self as unknown as WorkerScope;
const cores = (navigator as { hardwareConcurrency?: number }).hardwareConcurrency ?? 1;
const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

let backend: Promise<AttentionBackend> | undefined;

async function start(engine: 'wasm' | 'cpu'): Promise<void> {
  try {
    backend = engine === 'wasm' ? import('@fa/wasm').then((m) => m.createWasmBackend()) : resolveBackend('cpu');
    const b = await backend;
    scope.postMessage({ type: 'ready', device: engine === 'wasm' ? b.device : `Web Worker, 1 of ${cores} cores` });
  } catch (err) {
    scope.postMessage({ type: 'failed', message: message(err) });
  }
}

scope.onmessage = async (e) => {
  const m = e.data;
  if (m.type === 'start') return start(m.engine);
  try {
    if (!backend) throw new Error('the engine worker got a run before its engine');
    if (m.type === 'train') {
      const b = await backend;
      const result = await runTraining(b, [b], { ...TRAIN_DEFAULTS, seconds: m.seconds }, (step, loss, seconds) => {
        if (step % 10 === 0) scope.postMessage({ type: 'trainstep', id: m.id, step, loss, seconds });
      });
      scope.postMessage({ type: 'trained', id: m.id, result });
      return;
    }
    const report = await runOnBackend(await backend, m.req, (p) => scope.postMessage({ type: 'progress', id: m.id, p }));
    scope.postMessage({ type: 'result', id: m.id, report });
  } catch (err) {
    scope.postMessage({ type: 'error', id: m.id, message: message(err) });
  }
};
