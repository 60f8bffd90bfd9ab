/// <reference types="@webgpu/types" />
/** Dispatch plumbing: bind groups from buffer lists, and workgroup grids within the limits. */

/** A bind group of `pipe` binding buffers[i] (a whole buffer or a range) at binding i (undefined entries are left out). */
export function bindGroup(dev: GPUDevice, pipe: GPUComputePipeline, buffers: (GPUBuffer | GPUBufferBinding | undefined)[]): GPUBindGroup {
  const entries: GPUBindGroupEntry[] = [];
  buffers.forEach((b, i) => {
    if (b) entries.push({ binding: i, resource: isRange(b) ? b : { buffer: b } });
  });
  return dev.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries });
}

function isRange(b: GPUBuffer | GPUBufferBinding): b is GPUBufferBinding {
  return typeof (b as GPUBufferBinding).buffer === 'object';
}

/** Splits n workgroups over (x, y) so that x stays within the per-dimension limit. */
export function grid1d(n: number, max: number): [number, number] {
  if (n <= max) return [n, 1];
  const y = Math.ceil(n / max);
  return [Math.ceil(n / y), y];
}
