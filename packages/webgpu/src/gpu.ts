/**
 * Finding a WebGPU implementation and a device: navigator.gpu in browsers (and Deno), the
 * optional peer package `webgpu` (Dawn) in Node. Every failure says exactly why.
 */
/// <reference types="@webgpu/types" />
import { FAError } from '@fa/core';

export const BufferUsage = { MAP_READ: 1, MAP_WRITE: 2, COPY_SRC: 4, COPY_DST: 8, UNIFORM: 64, STORAGE: 128 } as const;
export const MapModeRead = 1;

export interface AcquireOptions {
  /** A GPU object to use instead of navigator.gpu / the `webgpu` package. */
  readonly gpu?: GPU;
  /** Use this device as it is (the backend will not destroy it, nor re-acquire it after loss). */
  readonly device?: GPUDevice;
  readonly powerPreference?: GPUPowerPreference;
  /** Flags for the `webgpu` package's create(), e.g. ['enable-dawn-features=allow_unsafe_apis']. */
  readonly dawnFlags?: readonly string[];
  /** Request subgroups when the adapter has them (default true). */
  readonly subgroups?: boolean;
}

export interface Acquired {
  readonly device: GPUDevice;
  readonly adapterName: string;
  readonly features: ReadonlySet<string>;
  readonly subgroupMin: number;
  readonly subgroupMax: number;
  readonly owned: boolean;
  /** A CPU implementation (llvmpipe/lavapipe, SwiftShader, a fallback adapter). */
  readonly cpu: boolean;
  readonly source: 'navigator.gpu' | 'webgpu package' | 'given';
}

function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === 'string';
}

let nodeGpu: GPU | undefined;

/** navigator.gpu, or the `webgpu` package's create() in Node. */
export async function findGPU(opts: AcquireOptions = {}): Promise<{ gpu: GPU; source: Acquired['source'] }> {
  if (opts.gpu) return { gpu: opts.gpu, source: 'given' };
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (nav?.gpu) return { gpu: nav.gpu, source: 'navigator.gpu' };
  if (!isNode()) {
    throw new FAError('E_DEVICE', 'navigator.gpu is not available: this browser has no WebGPU, it is disabled, or the page is not a secure context (https or localhost)');
  }
  if (!nodeGpu) {
    const name = 'webgpu'; // a variable, so that bundlers leave the optional peer alone
    let mod: { create?: (flags: string[]) => GPU };
    try {
      mod = (await import(/* @vite-ignore */ name)) as typeof mod;
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
        throw new FAError('E_DEVICE', "package 'webgpu' is not installed (it is an optional peer dependency: npm install webgpu@0.6.2)", { cause: e });
      }
      throw new FAError('E_DEVICE', `package 'webgpu' is installed but failed to load: ${(e as Error).message}`, { cause: e });
    }
    if (typeof mod.create !== 'function') throw new FAError('E_DEVICE', "package 'webgpu' has no create() function (expected webgpu >= 0.2)");
    try {
      nodeGpu = mod.create([...(opts.dawnFlags ?? [])]);
    } catch (e) {
      throw new FAError('E_DEVICE', `package 'webgpu' failed to create a GPU instance: ${(e as Error).message}`, { cause: e });
    }
  }
  return { gpu: nodeGpu, source: 'webgpu package' };
}

const CPU_NAMES = /llvmpipe|lavapipe|swiftshader|software|fallback/i;

function adapterName(info: GPUAdapterInfo | undefined): string {
  if (!info) return 'WebGPU adapter';
  const parts = [info.description, info.device, info.vendor && info.architecture ? `${info.vendor} ${info.architecture}` : info.vendor].filter((x) => typeof x === 'string' && x.length > 0);
  return (parts[0] as string | undefined) ?? 'WebGPU adapter';
}

const WANT_LIMITS = [
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
] as const;

export async function acquire(opts: AcquireOptions = {}): Promise<Acquired> {
  if (opts.device) {
    const d = opts.device;
    const info = (d as { adapterInfo?: GPUAdapterInfo }).adapterInfo;
    return {
      device: d,
      adapterName: adapterName(info),
      features: new Set([...d.features] as string[]),
      subgroupMin: (info as { subgroupMinSize?: number } | undefined)?.subgroupMinSize ?? 0,
      subgroupMax: (info as { subgroupMaxSize?: number } | undefined)?.subgroupMaxSize ?? 0,
      owned: false,
      cpu: CPU_NAMES.test(adapterName(info)) || (info as { isFallbackAdapter?: boolean } | undefined)?.isFallbackAdapter === true,
      source: 'given',
    };
  }
  const { gpu, source } = await findGPU(opts);
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter(opts.powerPreference ? { powerPreference: opts.powerPreference } : undefined);
  } catch (e) {
    throw new FAError('E_DEVICE', `requestAdapter failed: ${(e as Error).message}`, { cause: e });
  }
  if (!adapter) {
    const hint = source === 'webgpu package' ? ' (Node: Dawn found no Vulkan driver; install one, e.g. scripts/setup-webgpu.sh, or set VK_ICD_FILENAMES)' : '';
    throw new FAError('E_DEVICE', `no WebGPU adapter (requestAdapter returned null)${hint}`);
  }
  const want: GPUFeatureName[] = [];
  const has = (f: string) => adapter.features.has(f);
  if (opts.subgroups !== false && has('subgroups')) want.push('subgroups' as GPUFeatureName);
  if (has('shader-f16')) want.push('shader-f16');
  const requiredLimits: Record<string, number> = {};
  for (const k of WANT_LIMITS) {
    const v = (adapter.limits as unknown as Record<string, number>)[k];
    if (typeof v === 'number') requiredLimits[k] = v;
  }
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice({ requiredFeatures: want, requiredLimits });
  } catch (e) {
    throw new FAError('E_DEVICE', `requestDevice failed on ${adapterName(adapter.info)}: ${(e as Error).message}`, { cause: e });
  }
  const info = adapter.info as GPUAdapterInfo & { subgroupMinSize?: number; subgroupMaxSize?: number };
  return {
    device,
    adapterName: adapterName(info),
    features: new Set([...device.features] as string[]),
    subgroupMin: info?.subgroupMinSize ?? 0,
    subgroupMax: info?.subgroupMaxSize ?? 0,
    owned: true,
    cpu: CPU_NAMES.test(adapterName(info)) || (info as { isFallbackAdapter?: boolean }).isFallbackAdapter === true || (adapter as { isFallbackAdapter?: boolean }).isFallbackAdapter === true,
    source,
  };
}
