import type { NativeBinding, NativeContext } from '../src/native.js';
export interface FuzzStats {
  calls: number;
  threw: number;
  notErrors: number;
  badCodes: number;
  resolved: number;
  samples: Map<string, number>;
}
export function validSpec(ctx: NativeContext, backward?: boolean): Record<string, unknown>;
export function fuzzBinding(binding: NativeBinding, ctx: NativeContext, other: NativeContext, count?: number, seed?: number): Promise<FuzzStats>;
