/**
 * Worker-thread entry of the CPU engine's pool. Each message is { id, job }; the worker runs
 * units of the job until the shared counter runs out and answers { id, ok } (or the error).
 * Tensors arrive as SharedArrayBuffer views, so results land directly in the caller's memory.
 */
import { parentPort } from 'node:worker_threads';
import { Workspace, type Job } from './job.js';
import { runJob } from './run.js';

const ws = new Workspace();
const port = parentPort;
if (port) {
  port.on('message', (msg: { id: number; job: Job }) => {
    try {
      runJob(msg.job, ws);
      port.postMessage({ id: msg.id, ok: true });
    } catch (err) {
      const e = err as { name?: string; message?: string; code?: string; stack?: string };
      port.postMessage({ id: msg.id, ok: false, error: { name: e?.name ?? 'Error', message: e?.message ?? String(err), code: e?.code, stack: e?.stack } });
    }
  });
}
