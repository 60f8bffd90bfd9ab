/**
 * Which engine tells the story: cuda, then webgpu on a hardware adapter, then native (the wasm
 * engine's kernels compiled for x86-64, Node on Linux), then wasm, then cpu (a
 * software WebGPU adapter such as SwiftShader or lavapipe is slower than the CPU engines),
 * passing over an engine whose supports() declines the story's problem (core's choice by
 * problem, askSupports). --backend NAME overrides, software adapters included; a named engine
 * that declines is E_UNSUPPORTED.
 */
import { askSupports, FAError, listBackends, resolveBackend, type AttentionBackend, type AttentionProblem } from '@fa/core';
import { loadOptionalEngines, pickBackend, requireSupports } from './engines.js';
import { isSoftwareAdapter } from './story/engine-kind.js';

export { isSoftwareAdapter };

const STORY_ORDER = ['cuda', 'webgpu', 'native', 'wasm', 'cpu'];

export interface Candidate {
  readonly name: string;
  /** "used", "available", "skipped: ...", "unavailable: ...", "not tried". */
  status: string;
  backend?: AttentionBackend;
}

/** The problem a command would run on an engine (its dtype and sizes may depend on the engine). */
export type ProblemFor = (b: AttentionBackend) => AttentionProblem;

/**
 * Resolves every engine (cuda, webgpu, native, wasm, cpu) and picks the first that computes
 * `problemFor(it)`; `requested` = --backend.
 */
export async function pickStoryBackend(requested = 'auto', problemFor?: ProblemFor): Promise<{ backend: AttentionBackend; candidates: Candidate[] }> {
  const engines = await loadOptionalEngines(requested);
  const supportFor = (b: AttentionBackend) => (problemFor ? askSupports(b, problemFor(b)) : { ok: true as const });
  if (requested !== 'auto') {
    // --backend NAME: start only that engine (the one-line error for unknown or unavailable names)
    const backend = await pickBackend(requested);
    if (problemFor) requireSupports(backend, requested, problemFor(backend));
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
    const s = supportFor(c.backend);
    if (!s.ok) {
      c.status = `skipped: declines this problem (${s.reason})`;
      continue;
    }
    chosen = c.backend;
    c.status = 'used';
    break;
  }
  if (!chosen) {
    // only a software adapter or declining engines: the cpu engine, if it computes the problem
    const cpu = await pickBackend('cpu');
    if (!supportFor(cpu).ok) throw new FAError('E_UNSUPPORTED', `no engine computes this problem (${candidates.map((c) => `${c.name}: ${c.status}`).join('; ')})`);
    chosen = cpu;
    const c = candidates.find((x) => x.name === 'cpu');
    if (c) c.status = 'used';
  }
  return { backend: chosen, candidates };
}
