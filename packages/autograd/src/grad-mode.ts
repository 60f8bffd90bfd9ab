/**
 * Whether ops record the graph. `noGrad(fn)` runs fn (sync or async) with recording off, like
 * PyTorch's `torch.no_grad()`. The switch is global: while an async `noGrad` body awaits, other
 * code running in between also sees recording off, so do not interleave training steps.
 */
let disabled = 0;

export function isGradEnabled(): boolean {
  return disabled === 0;
}

function isPromise<T>(x: unknown): x is Promise<T> {
  return typeof x === 'object' && x !== null && typeof (x as { then?: unknown }).then === 'function';
}

function scoped<T>(delta: number, fn: () => T): T {
  disabled += delta;
  let result: T;
  try {
    result = fn();
  } catch (e) {
    disabled -= delta;
    throw e;
  }
  if (isPromise(result)) {
    return result.finally(() => {
      disabled -= delta;
    }) as T;
  }
  disabled -= delta;
  return result;
}

/** Runs fn without recording the graph: outputs have no gradFn and hold nothing for backward. */
export function noGrad<T>(fn: () => T): T {
  return scoped(1, fn);
}

/** Runs fn with recording on, even inside noGrad (checkpoint's recomputation uses this). */
export function enableGrad<T>(fn: () => T): T {
  const saved = disabled;
  disabled = 0;
  let result: T;
  try {
    result = fn();
  } catch (e) {
    disabled = saved;
    throw e;
  }
  if (isPromise(result)) {
    return result.finally(() => {
      disabled = saved;
    }) as T;
  }
  disabled = saved;
  return result;
}
