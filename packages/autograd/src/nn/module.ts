/** Module: a container of parameters and sub-modules, found by walking its own fields (as torch.nn.Module). */
import { Tensor } from '../tensor.js';
import type { DeviceEngine } from '../device.js';

export abstract class Module {
  /** Every trainable leaf tensor of this module and its sub-modules, each once. */
  parameters(): Tensor[] {
    return this.namedParameters().map(([, p]) => p);
  }

  /** [dotted.name, parameter] pairs, in field order. */
  namedParameters(prefix = ''): [string, Tensor][] {
    const out: [string, Tensor][] = [];
    const seen = new Set<Tensor>();
    const visit = (value: unknown, name: string): void => {
      if (value instanceof Tensor) {
        if (value.isLeaf && value.requiresGrad && !seen.has(value)) {
          seen.add(value);
          out.push([name, value]);
        }
      } else if (value instanceof Module) {
        for (const [k, v] of Object.entries(value)) visit(v, name ? `${name}.${k}` : k);
      } else if (Array.isArray(value)) {
        value.forEach((v, i) => visit(v, `${name}.${i}`));
      }
    };
    for (const [k, v] of Object.entries(this)) visit(v, prefix ? `${prefix}.${k}` : k);
    return out;
  }

  /** Total number of parameter elements. */
  numParameters(): number {
    return this.parameters().reduce((a, p) => a + p.size, 0);
  }

  /**
   * Moves every parameter (and any other tensor field) to `engine`'s device, in place, keeping
   * tied parameters tied (a tensor held by two fields moves once). Returns this module.
   */
  async to(engine: DeviceEngine): Promise<this> {
    const moved = new Map<Tensor, Tensor>();
    const move = async (t: Tensor): Promise<Tensor> => {
      let m = moved.get(t);
      if (!m) moved.set(t, (m = await t.to(engine, { requiresGrad: t.requiresGrad, name: t.name })));
      return m;
    };
    const visit = async (owner: Record<string, unknown> | unknown[], key: string | number): Promise<void> => {
      const value = (owner as Record<string | number, unknown>)[key];
      if (value instanceof Tensor) (owner as Record<string | number, unknown>)[key] = await move(value);
      else if (value instanceof Module) for (const k of Object.keys(value)) await visit(value as unknown as Record<string, unknown>, k);
      else if (Array.isArray(value)) for (let i = 0; i < value.length; i++) await visit(value, i);
    };
    for (const k of Object.keys(this)) await visit(this as unknown as Record<string, unknown>, k);
    return this;
  }

  /** Brings every device tensor field back to the host, in place (ties kept). Returns this module. */
  async toHost(): Promise<this> {
    const moved = new Map<Tensor, Tensor>();
    const visit = async (owner: Record<string, unknown> | unknown[], key: string | number): Promise<void> => {
      const value = (owner as Record<string | number, unknown>)[key];
      if (value instanceof Tensor && value.onDevice) {
        let m = moved.get(value);
        if (!m) {
          const h = await value.toHost();
          moved.set(value, (m = new Tensor(h.data, h.shape, { requiresGrad: value.requiresGrad, name: value.name })));
        }
        (owner as Record<string | number, unknown>)[key] = m;
      } else if (value instanceof Module) for (const k of Object.keys(value)) await visit(value as unknown as Record<string, unknown>, k);
      else if (Array.isArray(value)) for (let i = 0; i < value.length; i++) await visit(value, i);
    };
    for (const k of Object.keys(this)) await visit(this as unknown as Record<string, unknown>, k);
    return this;
  }

  zeroGrad(): void {
    for (const p of this.parameters()) p.grad = null;
  }
}
