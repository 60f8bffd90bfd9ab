/**
 * Backend discovery for the command: @fa/core registers "cpu" on import; the wasm and GPU engines
 * register themselves when their packages are installed and import cleanly. A package that is
 * missing or fails to load is a reason, never a crash.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { askSupports, FAError, fallbackNote, isKVCacheProblem, registerBackend, registeredBackendNames, resolveBackend, resolveBackendFor, type AttentionBackend, type ChoiceProblem } from '@fa/core';

export interface OptionalEngine {
  readonly name: string;
  readonly pkg: string;
  /** Why the package did not load; undefined when it loaded. */
  failure?: string;
}

export const OPTIONAL_ENGINES: readonly { name: string; pkg: string }[] = [
  { name: 'native', pkg: '@fa/wasm' },
  { name: 'wasm', pkg: '@fa/wasm' },
  { name: 'webgpu', pkg: '@fa/webgpu' },
  { name: 'cuda', pkg: '@fa/cuda' },
];

let loaded: Promise<OptionalEngine[]> | undefined;

/**
 * Linux: why Dawn (the `webgpu` package behind @fa/webgpu in Node) cannot find a GPU, when the
 * Vulkan loader has no driver (ICD) to load; undefined when one may be there. Starting Dawn
 * without a driver prints native warnings on stderr, which would break the one-line error
 * contract, so the command does not start it then. FA_WEBGPU_PROBE=1 starts it anyway.
 */
export function missingVulkanDriver(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (process.platform !== 'linux' || env.FA_WEBGPU_PROBE === '1') return undefined;
  if (env.VK_ICD_FILENAMES || env.VK_DRIVER_FILES || env.VK_ADD_DRIVER_FILES) return undefined;
  const roots = [
    ...(env.XDG_CONFIG_DIRS || '/etc/xdg').split(':'),
    '/etc',
    ...(env.XDG_DATA_DIRS || '/usr/local/share:/usr/share').split(':'),
    ...(env.HOME ? [join(env.HOME, '.local/share')] : []),
  ];
  for (const r of roots) {
    try {
      if (readdirSync(join(r, 'vulkan', 'icd.d')).some((f) => f.endsWith('.json'))) return undefined;
    } catch {
      /* no such folder */
    }
  }
  return 'no Vulkan driver found for Dawn (bash scripts/setup-webgpu.sh installs a software one; or set VK_ICD_FILENAMES)';
}

const SOFTWARE_ICD = /lvp|lavapipe|swiftshader/i;

/**
 * Linux: when every Vulkan driver the loader would find is a software one (lavapipe,
 * SwiftShader), a description of them; undefined otherwise. Such an adapter is slower than the
 * cpu engine, and Dawn prints native warnings about its limits on stderr, so the command starts
 * it only when asked for by name (--backend webgpu) or with FA_WEBGPU_PROBE=1.
 */
export function softwareVulkanOnly(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (process.platform !== 'linux' || env.FA_WEBGPU_PROBE === '1') return undefined;
  let files = (env.VK_ICD_FILENAMES || env.VK_DRIVER_FILES || '').split(':').filter(Boolean);
  if (files.length === 0) {
    for (const r of ['/etc/vulkan/icd.d', '/usr/local/share/vulkan/icd.d', '/usr/share/vulkan/icd.d']) {
      try {
        files.push(...readdirSync(r).filter((f) => f.endsWith('.json')));
      } catch {
        /* no such folder */
      }
    }
  }
  files = files.filter((f) => f.length > 0);
  if (files.length === 0 || !files.every((f) => SOFTWARE_ICD.test(f))) return undefined;
  return `only a software Vulkan driver is installed (${files.join(', ')}), slower than the cpu engine; --backend webgpu uses it`;
}

/**
 * Imports the optional engine packages once; returns each with its load failure, if any.
 * `requested` is the --backend choice: a software-only WebGPU is started only when named.
 */
export function loadOptionalEngines(requested = 'auto'): Promise<OptionalEngine[]> {
  loaded ??= Promise.all(
    OPTIONAL_ENGINES.map(async ({ name, pkg }): Promise<OptionalEngine> => {
      try {
        const spec: string = pkg; // a variable: the packages are optional, not compile-time deps
        const mod = (await import(spec)) as { WEBGPU_PRIORITY?: number };
        const noDriver = name === 'webgpu' ? missingVulkanDriver() ?? (requested === 'webgpu' ? undefined : softwareVulkanOnly()) : undefined;
        if (noDriver !== undefined) {
          // keep the engine listed, with the reason, without starting Dawn
          registerBackend(name, () => Promise.reject(new FAError('E_DEVICE', noDriver)), mod.WEBGPU_PRIORITY ?? 50);
        }
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

export const BACKEND_CHOICES = ['auto', 'cpu', 'wasm', 'native', 'webgpu', 'cuda'];

/** The backend for --backend NAME (auto = the best that starts). */
export async function pickBackend(name: string): Promise<AttentionBackend> {
  const engines = await loadOptionalEngines(name);
  const registered = registeredBackendNames();
  if (name !== 'auto' && !registered.includes(name)) {
    const opt = engines.find((e) => e.name === name);
    if (opt) throw new FAError('E_DEVICE', `backend ${name} is unavailable: ${opt.failure ?? `${opt.pkg} did not register a backend named ${name}`}`);
    throw new FAError('E_ARG', `unknown backend "${name}"; choose one of ${[...new Set([...BACKEND_CHOICES, ...registered])].join(', ')}`);
  }
  return resolveBackend(name);
}

/**
 * The backend for --backend NAME that computes `problem` (a dense call's, or a KV-cache call's:
 * then supportsKVCache() decides). auto: the highest-priority engine that accepts it, with a
 * one-line note when an engine above it declined (engines that did not start are `fa backends`'
 * news); a named engine that declines is E_UNSUPPORTED.
 */
export async function pickBackendFor(name: string, problem: ChoiceProblem): Promise<{ backend: AttentionBackend; note?: string }> {
  if (name === 'auto') {
    await loadOptionalEngines(name);
    const r = await resolveBackendFor(problem);
    const note = fallbackNote(r);
    return note === undefined ? { backend: r.backend } : { backend: r.backend, note };
  }
  const backend = await pickBackend(name);
  requireSupports(backend, name, problem);
  return { backend };
}

/** E_UNSUPPORTED, saying why and what to do, unless the engine --backend `name` started computes `problem`. */
export function requireSupports(backend: AttentionBackend, name: string, problem: ChoiceProblem): void {
  const s = askSupports(backend, problem);
  const what = isKVCacheProblem(problem) ? 'this KV-cache call' : 'this problem';
  if (!s.ok) throw new FAError('E_UNSUPPORTED', `backend ${name} cannot compute ${what}: ${s.reason} (--backend auto picks an engine that can)`);
}
