/**
 * What kind of machine an engine computes on, from its name and device (no engine imports, no
 * node:* imports: the command and the web page share it).
 */

/** Engines that compute on the CPU, on host tensors: timings are CPU figures. */
export const CPU_ENGINES: readonly string[] = ['cpu', 'wasm', 'native'];

export function onCpu(b: { readonly name: string }): boolean {
  return CPU_ENGINES.includes(b.name);
}

const SOFTWARE = /swiftshader|llvmpipe|lavapipe|software|basic render|microsoft basic/i;

/** A WebGPU adapter that is a CPU rasteriser (slower than the CPU engines). */
export function isSoftwareAdapter(b: { readonly name: string; readonly device: string }): boolean {
  return b.name === 'webgpu' && SOFTWARE.test(b.device);
}

/** A GPU engine on a hardware adapter: GPU sizes and figures (not a CPU engine, not a software adapter). */
export function onHardwareGpu(b: { readonly name: string; readonly device: string }): boolean {
  return !onCpu(b) && !isSoftwareAdapter(b);
}
