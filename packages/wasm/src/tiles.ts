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

/**
 * The native build's tiles: 128 query rows. Its products run 4× faster, so the packed K/V tiles a
 * query block sweeps (2 MiB per kv head at T = 4K, D = 64: past a 1 MiB L2) are streamed in
 * less time than they take to arrive; twice the rows per sweep halves that traffic (forward
 * +13–20 % at T = 4K, backward +13 %; T ≤ 2K within noise: KERNEL_NOTES.md, N7).
 */
export function chooseNativeTiles(d: number): TileSizes {
  return { br: 128, bc: d <= 64 ? 128 : d <= 128 ? 64 : 32 };
}

export function checkWasmTiles(t: unknown, what: string): TileSizes {
  if (typeof t !== 'object' || t === null) throw new FAError('E_ARG', `wasm engine option ${what} must be { br, bc }`);
  const { br, bc } = t as TileSizes;
  for (const [k, v] of [['br', br], ['bc', bc]] as const) {
    if (!Number.isSafeInteger(v) || v < 1 || v > MAX_TILE) throw new FAError('E_ARG', `wasm engine option ${what}.${k} must be an integer in [1, ${MAX_TILE}], got ${String(v)}`);
  }
  return { br, bc };
}
