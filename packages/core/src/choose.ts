/**
 * Engine choice by problem: the highest-priority engine whose supports() accepts the problem
 * (supportsKVCache() for a KV-cache call), with the reason each engine above it was passed
 * over. Pure (no registry, no I/O), so the registry's resolveBackendFor(), the auto backend and
 * the `fa` command share one rule.
 */
import { FAError } from './errors.js';
import type { AttentionBackend, Support } from './backend.js';
import { isKVCacheProblem, type KVCacheProblem } from './kvcache.js';
import type { AttentionProblem } from './problem.js';

/** The E_DEVICE message when no engine is registered at all (chooseEngine, resolveBackend). */
export const NO_BACKEND_REGISTERED = 'no backend is registered (import @fa/core, @fa/wasm, @fa/webgpu or @fa/cuda)';

/** What an engine is chosen for: a dense call (describeProblem) or a KV-cache call (describeKVCacheProblem). */
export type ChoiceProblem = AttentionProblem | KVCacheProblem;

/** A registered engine after an attempt to start it: its backend, or why it did not start. */
export interface EngineCandidate {
  readonly name: string;
  readonly backend?: AttentionBackend;
  /** Why it is unavailable (without a leading "unavailable:"); set when backend is not. */
  readonly reason?: string;
}

/** An engine ranked above the chosen one, and why it was not chosen. */
export interface PassedOver {
  readonly name: string;
  /** 'unavailable': it did not start; 'declined': it started and its supports() said no. */
  readonly why: 'unavailable' | 'declined';
  readonly reason: string;
}

export interface Resolution {
  /** The highest-priority engine that accepts the problem. */
  readonly backend: AttentionBackend;
  /** Every engine ranked above it, in order, with its reason. */
  readonly passedOver: readonly PassedOver[];
}

/**
 * supports(), or supportsKVCache() for a KV-cache problem (which must also be in the engine's
 * dtypes), with a throwing engine counted as declining (the registry must stay usable).
 */
export function askSupports(b: AttentionBackend, p: ChoiceProblem): { ok: true } | { ok: false; reason: string } {
  try {
    let s: Support;
    if (isKVCacheProblem(p)) {
      s = b.dtypes.includes(p.dtype) ? b.supportsKVCache(p) : { ok: false, reason: `dtype ${p.dtype} is not one of ${b.dtypes.join(', ')}` };
    } else {
      s = b.supports(p);
    }
    return s.ok ? { ok: true } : { ok: false, reason: s.reason };
  } catch (e) {
    return { ok: false, reason: `${isKVCacheProblem(p) ? 'supportsKVCache' : 'supports'}() failed: ${e instanceof Error ? e.message : String(e)}` };
  }
}

/**
 * The first candidate (candidates are in order of preference) that started and accepts `p`.
 * Throws FAError E_UNSUPPORTED when every engine that started declines (naming each reason), or
 * E_DEVICE when none started.
 */
export function chooseEngine(p: ChoiceProblem, candidates: readonly EngineCandidate[]): Resolution {
  const passedOver: PassedOver[] = [];
  for (const c of candidates) {
    if (!c.backend) {
      passedOver.push({ name: c.name, why: 'unavailable', reason: c.reason ?? 'unknown reason' });
      continue;
    }
    const s = askSupports(c.backend, p);
    if (s.ok) return { backend: c.backend, passedOver };
    passedOver.push({ name: c.name, why: 'declined', reason: s.reason });
  }
  if (candidates.length === 0) throw new FAError('E_DEVICE', NO_BACKEND_REGISTERED);
  const list = passedOver.map((x) => `${x.name}: ${x.why === 'unavailable' ? 'unavailable: ' : ''}${x.reason}`).join('; ');
  if (passedOver.every((x) => x.why === 'unavailable')) throw new FAError('E_DEVICE', `no backend is available (${list})`);
  throw new FAError('E_UNSUPPORTED', `no available engine computes this problem (${list})`);
}

/**
 * One line saying which engines declined the problem and which one runs it; undefined when no
 * started engine declined (an engine that did not start is `fa backends`' news, not every call's).
 */
export function fallbackNote(r: Resolution): string | undefined {
  const declined = r.passedOver.filter((x) => x.why === 'declined');
  if (declined.length === 0) return undefined;
  return `${declined.map((x) => `${x.name} declines this problem (${x.reason})`).join('; ')}; running it on ${r.backend.name}`;
}
