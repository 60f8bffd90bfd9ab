/**
 * Every failure the library reports is an FAError with a stable code. Callers branch on `code`;
 * the message is for a person and says what to change.
 */
export type FAErrorCode =
  | 'E_SHAPE' // a tensor's rank or extents do not fit the problem
  | 'E_DTYPE' // an unsupported dtype, or data of the wrong array type
  | 'E_ARG' // an option or argument with a bad value
  | 'E_UNSUPPORTED' // valid, but this engine cannot compute it (supports() says why)
  | 'E_TOO_LARGE' // would need more memory or a larger binding than allowed
  | 'E_OOM' // the device ran out of memory
  | 'E_DEVICE' // the device failed, was lost, or is unavailable
  | 'E_IO'; // a file could not be read or written, or is not in the expected format

export class FAError extends Error {
  readonly code: FAErrorCode;
  constructor(code: FAErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'FAError';
    this.code = code;
  }
}

export function isFAError(e: unknown): e is FAError {
  return e instanceof FAError || (typeof e === 'object' && e !== null && (e as { name?: unknown }).name === 'FAError' && typeof (e as { code?: unknown }).code === 'string');
}

/** Throws FAError(code, message) unless `cond` holds. */
export function check(cond: unknown, code: FAErrorCode, message: string | (() => string)): asserts cond {
  if (!cond) throw new FAError(code, typeof message === 'string' ? message : message());
}
