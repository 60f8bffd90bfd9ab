import type { CudaBackend, CudaBackendOptions } from '../src/backend.js';
export interface InteropResult {
  readonly name: string;
  readonly pass: boolean;
  readonly message: string;
}
export function interopChecks(peer: unknown, createCudaBackend: (o?: CudaBackendOptions) => Promise<CudaBackend>, onResult?: (r: InteropResult) => void): Promise<InteropResult[]>;
