/**
 * Which engine tells the story: cuda, then webgpu on a hardware adapter, then wasm, then cpu (a
 * software WebGPU adapter such as SwiftShader or lavapipe is slower than the CPU engines).
 * --backend NAME overrides, software adapters included.
 */
import { listBackends, resolveBackend, type AttentionBackend } from '@fa/core';
import { loadOptionalEngines, pickBackend } from './engines.js';
import { isSoftwareAdapter } from './story/engine-kind.js';

export { isSoftwareAdapter };

const STORY_ORDER = ['cuda', 'webgpu', 'wasm', 'cpu'];

export interface Candidate {
  readonly name: string;
  /** "used", "available", "skipped: ...", "unavailable: ...", "not tried". */
  status: string;
  backend?: AttentionBackend;
}

/** Resolves every engine (cuda, webgpu, wasm, cpu) and picks one; `requested` = --backend. */
export async function pickStoryBackend(requested = 'auto'): Promise<{ backend: AttentionBackend; candidates: Candidate[] }> {
  const engines = await loadOptionalEngines(requested);
  if (requested !== 'auto') {
    // --backend NAME: start only that engine (the one-line error for unknown or unavailable names)
    const backend = await pickBackend(requested);
    const candidates = STORY_ORDER.map((name): Candidate => (name === backend.name ? { name, status: 'used', backend } : { name, status: `not tried (--backend ${requested})` }));
    return { backend, candidates };
  }
  const listed = await listBackends(); // starts each engine once (cached by the registry)
  const candidates: Candidate[] = [];
  for (const name of STORY_ORDER) {
    const opt = engines.find((e) => e.name === name);
    const st = listed.find((b) => b.name === name);
    if (opt?.failure) candidates.push({ name, status: `unavailable: ${opt.failure}` });
    else if (!st) candidates.push({ name, status: `unavailable: ${opt?.pkg ?? name} registered no backend named ${name}` });
    else if (!st.available) candidates.push({ name, status: `unavailable: ${(st.reason ?? 'unknown reason').replace(/^(unavailable: )+/, '')}` });
    else candidates.push({ name, status: 'available', backend: await resolveBackend(name) });
  }
  let chosen: AttentionBackend | undefined;
  for (const c of candidates) {
    if (!c.backend) continue;
    if (isSoftwareAdapter(c.backend)) {
      c.status = `skipped: software adapter (${c.backend.device}); --backend webgpu uses it`;
      continue;
    }
    chosen = c.backend;
    c.status = 'used';
    break;
  }
  chosen ??= await pickBackend('cpu');
  return { backend: chosen, candidates };
}
