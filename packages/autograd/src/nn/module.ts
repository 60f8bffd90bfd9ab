/** Module: a container of parameters and sub-modules, found by walking its own fields (as torch.nn.Module). */
import { Tensor } from '../tensor.js';

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

  zeroGrad(): void {
    for (const p of this.parameters()) p.grad = null;
  }
}
