/**
 * Small helpers the kit's checks share (check.ts, kvcache-check.ts): a clock, an error in words,
 * and the rule for a bad call (refused with an FAError of the expected code).
 */
import { isFAError, type FAErrorCode } from '../errors.js';

export const now = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

/** An error in one line: "FAError CODE: message", "Name: message", or the value. */
export function describeError(e: unknown): string {
  if (isFAError(e)) return `FAError ${e.code}: ${e.message}`;
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}

/** A call that must be refused with an FAError of `code`; `what` says what is wrong with it. */
export interface BadCall {
  readonly what: string;
  readonly code: FAErrorCode;
  readonly call: () => Promise<unknown>;
}

/**
 * Runs a bad call; returns what was wrong with its refusal, or undefined when it rejected with an
 * FAError of the expected code and a message (`oneLine`: one non-empty line).
 */
export async function refusalProblem(bi: BadCall, opts: { readonly oneLine?: boolean } = {}): Promise<string | undefined> {
  try {
    await bi.call();
    return `${bi.what}: accepted, expected FAError ${bi.code}`;
  } catch (e) {
    if (!isFAError(e)) return `${bi.what}: threw ${describeError(e)}, expected an FAError ${bi.code}`;
    if (e.code !== bi.code) return `${bi.what}: FAError ${e.code} (${e.message}), expected ${bi.code}`;
    if (opts.oneLine) {
      if (!e.message || /\n/.test(e.message)) return `${bi.what}: the FAError message must be one non-empty line, got ${JSON.stringify(e.message)}`;
    } else if (!e.message) {
      return `${bi.what}: FAError ${e.code} without a message`;
    }
    return undefined;
  }
}
