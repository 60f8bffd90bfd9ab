import type { NativeBinding, NativeContext } from '../src/native.js';
export interface FuzzStats {
  calls: number;
  threw: number;
  notErrors: number;
  badCodes: number;
  resolved: number;
  /** 1 when a refused KV-cache call changed the caches (checked on a GPU only). */
  kvCacheChanged: number;
  samples: Map<string, number>;
  /** What was mutated in the first calls that resolved (a healthy run has none). */
  resolvedCalls: string[];
}
export const FUZZ_BASES: readonly { readonly dtype: 'f32' | 'f16' | 'bf16'; readonly d: number }[];
export function validSpec(ctx: NativeContext, backward?: boolean, base?: { dtype?: 'f32' | 'f16' | 'bf16'; d?: number }): Record<string, unknown>;
export const KV_FUZZ_BASES: readonly { readonly dtype: 'f32' | 'f16' | 'bf16'; readonly d: number }[];
export function validKvSpec(ctx: NativeContext, base?: { dtype?: 'f32' | 'f16' | 'bf16'; d?: number }): Record<string, unknown>;
export function fuzzBinding(binding: NativeBinding, ctx: NativeContext, other: NativeContext, count?: number, seed?: number): Promise<FuzzStats>;
