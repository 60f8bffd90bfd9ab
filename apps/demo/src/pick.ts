/**
 * Which engine tells the story: cuda, then webgpu on a hardware adapter, then cpu (a software
 * WebGPU adapter such as SwiftShader or lavapipe is slower than the CPU engine). --backend NAME
 * overrides, software adapters included.
 */
import { resolveBackend, type AttentionBackend } from '@fa/core';
import { loadOptionalEngines, pickBackend } from './engines.js';

export interface Candidate {
  readonly name: string;
  /** "used", "available", "skipped: ...", "unavailable: ...", "not tried". */
  status: string;
  backend?: AttentionBackend;
}

const SOFTWARE = /swiftshader|llvmpipe|lavapipe|software|basic render|microsoft basic/i;

export function isSoftwareAdapter(b: AttentionBackend): boolean {
  return b.name === 'webgpu' && SOFTWARE.test(b.device);
}

async function tryResolve(name: string): Promise<{ backend?: AttentionBackend; reason?: string }> {
  try {
    return { backend: await resolveBackend(name) };
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    return { reason: msg.replace(/^backend \S+ is unavailable: /, '') };
  }
}

/** Resolves every engine (cuda, webgpu, cpu) and picks one; `requested` = --backend. */
export async function pickStoryBackend(requested = 'auto'): Promise<{ backend: AttentionBackend; candidates: Candidate[] }> {
  const engines = await loadOptionalEngines();
  const candidates: Candidate[] = [];
  for (const name of ['cuda', 'webgpu', 'cpu']) {
    const opt = engines.find((e) => e.name === name);
    if (opt?.failure) {
      candidates.push({ name, status: `unavailable: ${opt.failure}` });
      continue;
    }
    const r = await tryResolve(name);
    if (r.backend) candidates.push({ name, status: 'available', backend: r.backend });
    else candidates.push({ name, status: `unavailable: ${r.reason ?? 'unknown reason'}` });
  }
  let chosen: AttentionBackend | undefined;
  if (requested !== 'auto') {
    chosen = await pickBackend(requested); // throws the one-line error for unknown/unavailable names
  } else {
    for (const c of candidates) {
      if (!c.backend) continue;
      if (isSoftwareAdapter(c.backend)) {
        c.status = `skipped: software adapter (${c.backend.device}); --backend webgpu uses it`;
        continue;
      }
      chosen = c.backend;
      break;
    }
    chosen ??= await pickBackend('cpu');
  }
  for (const c of candidates) if (c.backend === chosen || c.name === chosen.name) c.status = 'used';
  return { backend: chosen, candidates };
}
