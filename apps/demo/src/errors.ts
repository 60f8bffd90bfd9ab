/**
 * Every failure of the `fa` command becomes exactly one line on stderr: `fa: E_CODE: message`.
 * FAErrors keep their code; anything else is mapped to the closest code (never a stack trace).
 */
import { FAError, isFAError, type FAErrorCode } from '@fa/core';

const IO_CODES = new Set(['ENOENT', 'EACCES', 'EPERM', 'EISDIR', 'ENOTDIR', 'EEXIST', 'EMFILE', 'ENFILE', 'ENOSPC', 'EROFS', 'EIO', 'ELOOP', 'ENAMETOOLONG', 'EBUSY', 'EPIPE', 'EFBIG', 'EDQUOT']);

/** The FAError code and a one-line message for any thrown value. */
export function classify(e: unknown): { code: FAErrorCode; message: string } {
  if (isFAError(e)) return { code: e.code, message: oneLine(e.message) };
  const err = e as { code?: unknown; message?: unknown; name?: unknown } | null;
  const msg = oneLine(err && typeof err.message === 'string' ? err.message : String(e));
  const code = err && typeof err.code === 'string' ? err.code : '';
  if (code.startsWith('ERR_PARSE_ARGS')) return { code: 'E_ARG', message: msg };
  if (IO_CODES.has(code)) return { code: 'E_IO', message: msg };
  if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') return { code: 'E_DEVICE', message: msg };
  if (e instanceof RangeError && /allocation failed|Invalid typed array length|Array buffer|out of memory/i.test(msg)) {
    return { code: 'E_OOM', message: `out of host memory (${msg})` };
  }
  return { code: 'E_DEVICE', message: `unexpected error: ${err && typeof err.name === 'string' ? err.name + ': ' : ''}${msg}` };
}

export function oneLine(s: string): string {
  return s.replace(/\s*[\r\n]+\s*/g, ' ').trim() || 'unknown error';
}

export function formatError(e: unknown): string {
  const { code, message } = classify(e);
  return `fa: ${code}: ${message}`;
}

/** A usage error (bad flag, missing flag, bad value). */
export function argError(message: string): FAError {
  return new FAError('E_ARG', message);
}
