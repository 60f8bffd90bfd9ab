/**
 * The CPU engine of @fa/core in a Web Worker: a page has no worker_threads, so the engine runs
 * single-threaded here, off the page's main thread, which stays responsive.
 */
import { resolveBackend } from '@fa/core';
import { runOnBackend, type RunRequest } from './session.js';

interface WorkerScope {
  postMessage(m: unknown): void;
  onmessage: ((e: MessageEvent<{ type: 'run'; id: number; req: RunRequest }>) => void) | null;
}
const scope = self as unknown as WorkerScope;

scope.onmessage = async (e) => {
  const { id, req } = e.data;
  try {
    const backend = await resolveBackend('cpu');
    const report = await runOnBackend(backend, req, (p) => scope.postMessage({ type: 'progress', id, p }));
    scope.postMessage({ type: 'result', id, report });
  } catch (err) {
    scope.postMessage({ type: 'error', id, message: err instanceof Error ? err.message : String(err) });
  }
};
scope.postMessage({ type: 'ready', device: `Web Worker, 1 of ${(navigator as { hardwareConcurrency?: number }).hardwareConcurrency ?? 1} cores` });
