/// <reference types="@webgpu/types" />
/** The compiled-pipeline cache: one pipeline per kernel key, compile errors as FAError. */
import { FAError } from '@fa/core';
import { errorText } from './errors.js';

export class PipelineCache {
  private readonly pipelines = new Map<string, Promise<GPUComputePipeline>>();

  /** `deviceName` names the adapter in compile-error messages (read when the error happens). */
  constructor(private readonly deviceName: () => string) {}

  /** The pipeline of `key`, compiling `code()` on `dev` the first time it is asked for. */
  get(dev: GPUDevice, key: string, code: () => string): Promise<GPUComputePipeline> {
    let p = this.pipelines.get(key);
    if (!p) {
      const source = code();
      const module = dev.createShaderModule({ code: source, label: key });
      p = dev.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' }, label: key }).catch(async (e: unknown) => {
        this.pipelines.delete(key);
        let detail = errorText(e);
        try {
          const info = await module.getCompilationInfo();
          const msgs = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
          if (msgs.length) detail += `; ${msgs.slice(0, 3).join('; ')}`;
        } catch {
          /* no compilation info */
        }
        throw new FAError('E_DEVICE', `webgpu: the ${key} kernel did not compile on ${this.deviceName()}: ${detail}`, { cause: e });
      });
      this.pipelines.set(key, p);
    }
    return p;
  }

  clear(): void {
    this.pipelines.clear();
  }
}
