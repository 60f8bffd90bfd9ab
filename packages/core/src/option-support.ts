/**
 * Options that not every engine computes yet (issue 26: sinks first). Each engine's supports()
 * and supportsKVCache() ask here first, naming what it claims, so that an engine never ignores
 * an option it does not know: it declines with the reason, and choice by problem (choose.ts)
 * passes the call to one that computes it. The goal is that every engine claims every option.
 */
import type { Support } from './backend.js';

export interface OptionClaims {
  /** Attention sinks (AttentionOptions.sinks) in the dense calls, forward and backward. */
  readonly sinks?: boolean;
  /** Sinks in the KV-cache call. */
  readonly kvSinks?: boolean;
}

const OK: Support = { ok: true };

/** Declines a problem with an option the engine does not claim; { ok: true } otherwise. */
export function optionSupport(p: { readonly sinks?: Float32Array; readonly kind?: string }, engine: string, claims: OptionClaims): Support {
  const kv = p.kind === 'kvcache';
  if (p.sinks !== undefined && !(kv ? claims.kvSinks : claims.sinks)) {
    return { ok: false, reason: `the ${engine} engine does not compute attention sinks${kv ? ' in the KV-cache call' : ''} yet` };
  }
  return OK;
}
