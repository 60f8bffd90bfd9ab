/**
 * Tile sizes of the wasm kernels (float32 tiles; KERNEL_NOTES.md has the sweep behind them).
 * The K^T panel a row block of S = Q K^T sweeps (D x bc floats) should stay within a third of a
 * 48 KiB L1 data cache, which gives bc = 64 up to D = 128 and 32 above; br = 64 amortises each
 * packed key tile over 64 query rows and keeps the float32 score and output tiles (br x bc,
 * br x D) within L2.
 */
import { FAError, type TileSizes } from '@fa/core';

export const MAX_TILE = 1024;

export function chooseWasmTiles(d: number): TileSizes {
  return { br: 64, bc: d <= 128 ? 64 : 32 };
}

export function checkWasmTiles(t: unknown, what: string): TileSizes {
  if (typeof t !== 'object' || t === null) throw new FAError('E_ARG', `wasm engine option ${what} must be { br, bc }`);
  const { br, bc } = t as TileSizes;
  for (const [k, v] of [['br', br], ['bc', bc]] as const) {
    if (!Number.isSafeInteger(v) || v < 1 || v > MAX_TILE) throw new FAError('E_ARG', `wasm engine option ${what}.${k} must be an integer in [1, ${MAX_TILE}], got ${String(v)}`);
  }
  return { br, bc };
}
