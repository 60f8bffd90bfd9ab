/** .npy files on disk, through @fa/core's pure parser and writer. Errors are E_IO with the path. */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { FAError, parseNpy, serializeNpy, type NpyArray } from '@fa/core';

function ioMessage(e: unknown): string {
  const c = (e as { code?: string }).code;
  if (c === 'ENOENT') return 'no such file';
  if (c === 'EACCES' || c === 'EPERM') return 'permission denied';
  if (c === 'EISDIR') return 'is a directory';
  if (c === 'ENOTDIR') return 'a parent is not a directory';
  if (c === 'ENOSPC') return 'no space left on the device';
  return (e as Error).message ?? String(e);
}

export async function readNpyFile(path: string, what: string): Promise<NpyArray> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (e) {
    throw new FAError('E_IO', `cannot read ${what} ${path}: ${ioMessage(e)}`, { cause: e });
  }
  return parseNpy(bytes, `${what} ${path}`);
}

export async function writeNpyFile(path: string, a: NpyArray): Promise<void> {
  try {
    await writeFile(path, serializeNpy(a));
  } catch (e) {
    throw new FAError('E_IO', `cannot write ${path}: ${ioMessage(e)}`, { cause: e });
  }
}

export async function makeDir(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true });
  } catch (e) {
    throw new FAError('E_IO', `cannot create the output directory ${dir}: ${ioMessage(e)}`, { cause: e });
  }
}
