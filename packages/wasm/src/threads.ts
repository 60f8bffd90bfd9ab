/**
 * The engine's worker threads: core's WorkerPool (one job at a time, units from a shared
 * counter, a crashed worker fails its job and is replaced) over Node worker_threads, or over Web
 * Workers through a small adapter with the Node Worker surface the pool uses. Every worker gets
 * the compiled module and the shared memory when it starts.
 */
import { WorkerPool } from '@fa/core';
import type { Worker as NodeWorker } from 'node:worker_threads';
import type { WasmJob } from './job.js';
import type { WorkerInit } from './worker.js';

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

export type WasmPool = WorkerPool<WasmJob>;

export async function createPool(size: number, init: WorkerInit, host: 'node' | 'web', label = 'wasm'): Promise<WasmPool> {
  if (host === 'node') {
    const wt = (await importNode('node:worker_threads')) as typeof import('node:worker_threads');
    class NodeWasmWorker extends wt.Worker {
      constructor(url: URL, opts?: { name?: string; execArgv?: string[] }) {
        super(url, { ...opts, workerData: init });
      }
    }
    return new WorkerPool<WasmJob>(size, NodeWasmWorker, new URL('./worker.js', import.meta.url), label);
  }

  /** A Web Worker dressed as the part of a Node Worker that WorkerPool uses. */
  class WebWasmWorker {
    private readonly w: Worker;
    constructor(_url: URL, opts?: { name?: string }) {
      // The literal `new Worker(new URL(…, import.meta.url))` lets bundlers (Vite) find and bundle the worker.
      this.w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: opts?.name });
      this.w.postMessage({ init });
    }
    on(event: string, fn: (x: unknown) => void): this {
      if (event === 'message') this.w.addEventListener('message', (e) => fn((e as MessageEvent).data));
      else if (event === 'error') {
        this.w.addEventListener('error', (e) => {
          e.preventDefault();
          fn(new Error((e as ErrorEvent).message || 'the worker failed to load or threw'));
        });
        this.w.addEventListener('messageerror', () => fn(new Error('a message to the worker could not be deserialised')));
      }
      return this;
    }
    postMessage(m: unknown): void {
      this.w.postMessage(m);
    }
    ref(): void {}
    unref(): void {}
    terminate(): Promise<number> {
      this.w.terminate();
      return Promise.resolve(0);
    }
  }
  const Ctor = WebWasmWorker as unknown as new (url: URL, opts?: { name?: string; execArgv?: string[] }) => NodeWorker;
  // The shim ignores the pool's URL (its own literal is what bundlers see); any URL will do.
  return new WorkerPool<WasmJob>(size, Ctor, new URL(import.meta.url), label);
}
