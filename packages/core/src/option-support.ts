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
  /** A head dim of v's own (Dv ≠ Dqk) in the dense calls. */
  readonly vDim?: boolean;
  /** Dropout (dense calls: the KV-cache call has none). */
  readonly dropout?: boolean;
  /** The KV-cache call's cacheLeftpad, cacheBatchIdx and rotary tables. */
  readonly kvLeftpad?: boolean;
  readonly kvBatchIdx?: boolean;
  readonly kvRotary?: boolean;
  /** A head dim of v's own in the KV-cache call (vCache [.., Hkv, Dv]: DeepSeek-style caches). */
  readonly kvVDim?: boolean;
  /** A latent KV cache (KVCacheOptions.vFromK: V the first Dv columns of K's rows, MLA decode). */
  readonly kvLatent?: boolean;
}

const OK: Support = { ok: true };

/** Declines a problem with an option the engine does not claim; { ok: true } otherwise. */
export function optionSupport(
  p: { readonly sinks?: Float32Array; readonly kind?: string; readonly d: number; readonly vDim?: number; readonly dropout?: unknown; readonly leftpad?: unknown; readonly batchIdx?: unknown; readonly rotary?: unknown; readonly latent?: boolean },
  engine: string,
  claims: OptionClaims,
): Support {
  const kv = p.kind === 'kvcache';
  if (kv) {
    if (p.latent && !claims.kvLatent) return { ok: false, reason: `the ${engine} engine does not compute a latent KV cache (vFromK) yet` };
    for (const [has, claim, what] of [[p.leftpad, claims.kvLeftpad, 'cacheLeftpad'], [p.batchIdx, claims.kvBatchIdx, 'cacheBatchIdx'], [p.rotary, claims.kvRotary, 'rotary embedding']] as const) {
      if (has !== undefined && !claim) return { ok: false, reason: `the ${engine} engine does not compute the KV-cache call's ${what} yet` };
    }
  }
  if (p.dropout !== undefined && !claims.dropout) return { ok: false, reason: `the ${engine} engine does not compute dropout yet` };
  if (p.vDim !== undefined && p.vDim !== p.d && !(kv ? claims.kvVDim : claims.vDim)) {
    return { ok: false, reason: `the ${engine} engine does not compute a head dim of v's own${kv ? ' in the KV-cache call' : ''} (Dqk ${p.d}, Dv ${p.vDim}) yet` };
  }
  if (p.sinks !== undefined && !(kv ? claims.kvSinks : claims.sinks)) {
    return { ok: false, reason: `the ${engine} engine does not compute attention sinks${kv ? ' in the KV-cache call' : ''} yet` };
  }
  return OK;
}
