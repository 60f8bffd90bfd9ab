/**
 * Worker entry of @fa/wasm, for Node's worker_threads and for Web Workers. The worker
 * instantiates the engine's compiled module over the engine's shared memory (from workerData in
 * Node, from a first { init } message in a browser), then answers each { id, job } with
 * { id, ok } (or the error) after running units of the job until its counter runs out: the
 * protocol of core's WorkerPool.
 */
import { runJob, type Kernels, type WasmJob } from './job.js';

export interface WorkerInit {
  /** The compiled binary (wasm), or undefined when `native` names the addon to load. */
  readonly module?: WebAssembly.Module;
  readonly memory: WebAssembly.Memory;
  /** The native build's addon (a file: URL's href), loaded by each worker. */
  readonly native?: string;
}

interface Reply {
  id: number;
  ok: boolean;
  error?: { name: string; message: string; code?: string; stack?: string };
}

let kernels: Promise<Kernels> | undefined;

async function instantiate(init: WorkerInit): Promise<Kernels> {
  if (init.native !== undefined) {
    // Node only; imported here so that a browser's worker bundle does not carry it
    const { loadAddon, nativeKernels } = await import('./native.js');
    return nativeKernels(await loadAddon(new URL(init.native)), init.memory);
  }
  if (!init.module) throw new Error('the worker received neither a module nor a native addon');
  return WebAssembly.instantiate(init.module, { env: { memory: init.memory } }).then((i) => i.exports as unknown as Kernels);
}

async function handle(msg: { id: number; job: WasmJob }, post: (r: Reply) => void): Promise<void> {
  try {
    if (!kernels) throw new Error('the worker received a job before its module');
    runJob(msg.job, await kernels, true);
    post({ id: msg.id, ok: true });
  } catch (err) {
    const e = err as { name?: string; message?: string; code?: string; stack?: string };
    post({ id: msg.id, ok: false, error: { name: e?.name ?? 'Error', message: e?.message ?? String(err), code: e?.code, stack: e?.stack } });
  }
}

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);
const proc = (globalThis as { process?: { versions?: { node?: string } } }).process;

if (typeof proc?.versions?.node === 'string') {
  const wt = (await importNode('node:worker_threads')) as typeof import('node:worker_threads');
  const port = wt.parentPort;
  if (port && wt.workerData) {
    kernels = instantiate(wt.workerData as WorkerInit);
    port.on('message', (m: { id: number; job: WasmJob }) => void handle(m, (r) => port.postMessage(r)));
  }
} else {
  const scope = globalThis as unknown as { postMessage(m: unknown): void; onmessage: ((e: MessageEvent) => void) | null };
  scope.onmessage = (e: MessageEvent) => {
    const m = e.data as { init?: WorkerInit; id: number; job: WasmJob };
    if (m.init) kernels = instantiate(m.init);
    else void handle(m, (r) => scope.postMessage(r));
  };
}
