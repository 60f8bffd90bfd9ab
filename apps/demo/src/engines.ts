/**
 * Backend discovery for the command: @fa/core registers "cpu" on import; the GPU engines
 * register themselves when their packages are installed and import cleanly. A package that is
 * missing or fails to load is a reason, never a crash.
 */
import { FAError, registeredBackendNames, resolveBackend, type AttentionBackend } from '@fa/core';

export interface OptionalEngine {
  readonly name: string;
  readonly pkg: string;
  /** Why the package did not load; undefined when it loaded. */
  failure?: string;
}

export const OPTIONAL_ENGINES: readonly { name: string; pkg: string }[] = [
  { name: 'webgpu', pkg: '@fa/webgpu' },
  { name: 'cuda', pkg: '@fa/cuda' },
];

let loaded: Promise<OptionalEngine[]> | undefined;

/** Imports the optional engine packages once; returns each with its load failure, if any. */
export function loadOptionalEngines(): Promise<OptionalEngine[]> {
  loaded ??= Promise.all(
    OPTIONAL_ENGINES.map(async ({ name, pkg }): Promise<OptionalEngine> => {
      try {
        const spec: string = pkg; // a variable: the packages are optional, not compile-time deps
        await import(spec);
        return { name, pkg };
      } catch (e) {
        const msg = e instanceof Error ? e.message : String(e);
        const notInstalled = (e as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' && msg.includes(`'${pkg}'`);
        return { name, pkg, failure: notInstalled ? `${pkg} is not installed` : `${pkg} failed to load: ${msg.split('\n')[0]}` };
      }
    }),
  );
  return loaded;
}

export const BACKEND_CHOICES = ['auto', 'cpu', 'webgpu', 'cuda'];

/** The backend for --backend NAME (auto = the best that starts). */
export async function pickBackend(name: string): Promise<AttentionBackend> {
  const engines = await loadOptionalEngines();
  const registered = registeredBackendNames();
  if (name !== 'auto' && !registered.includes(name)) {
    const opt = engines.find((e) => e.name === name);
    if (opt) throw new FAError('E_DEVICE', `backend ${name} is unavailable: ${opt.failure ?? `${opt.pkg} did not register a backend named ${name}`}`);
    throw new FAError('E_ARG', `unknown backend "${name}"; choose one of ${[...new Set([...BACKEND_CHOICES, ...registered])].join(', ')}`);
  }
  return resolveBackend(name);
}
