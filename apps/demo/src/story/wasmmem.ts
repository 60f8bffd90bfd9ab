/**
 * The wasm engine's memory probe, from what the engine reports (duck-typed, no engine import):
 * the most WebAssembly memory one of its calls used since begin() (float32 copies of the inputs,
 * the outputs written over them, tiles; the engine keeps that memory for its next call).
 */
import type { AttentionBackend } from '@fa/core';
import type { MemoryProbe } from './run.js';

interface WasmLike {
  readonly callBytesPeak: number;
  resetCallBytesPeak(): void;
}

export function wasmMemoryProbe(backend: AttentionBackend): MemoryProbe | undefined {
  const b = backend as unknown as Partial<WasmLike>;
  if (typeof b.resetCallBytesPeak !== 'function' || typeof b.callBytesPeak !== 'number') return undefined;
  const w = b as WasmLike;
  return {
    method: "WebAssembly memory of the engine's largest call (float32 copies of inputs and outputs, tiles)",
    begin() {
      w.resetCallBytesPeak();
    },
    sample() {
      /* exact: the engine records every call's peak */
    },
    end() {
      return w.callBytesPeak;
    },
  };
}
