/**
 * Rendezvous for one process per GPU: which rank this process is, and how the ranks agree on
 * NCCL's unique id (128 bytes that rank 0 makes with ncclGetUniqueId; the ranks then meet at
 * the address it names).
 *
 *   FA_RANK, FA_WORLD_SIZE, FA_LOCAL_RANK   this process's rank, the number of ranks, and its
 *                                           GPU on this machine (torchrun's RANK, WORLD_SIZE,
 *                                           LOCAL_RANK are read when ours are unset)
 *   FA_NCCL_ID        the id as 256 hex digits (set by a scheduler or a launcher), or else
 *   FA_NCCL_ID_FILE   a path every rank can read (a shared file system across machines): rank 0
 *                     writes the id there (atomically, by rename) and deletes it once every
 *                     rank has joined; the others wait for it. Use a fresh path for every job.
 */
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { FAError } from '@fa/core';

export const NCCL_ID_BYTES = 128;

export interface RankInfo {
  readonly rank: number;
  readonly size: number;
  /** The CUDA device of this process on its machine. */
  readonly localRank: number;
}

function intVar(env: Record<string, string | undefined>, names: readonly string[], fallback: number): number {
  for (const n of names) {
    const v = env[n];
    if (v === undefined || v === '') continue;
    const x = Number(v);
    if (!Number.isSafeInteger(x) || x < 0) throw new FAError('E_ARG', `${n} must be a non-negative integer, got ${JSON.stringify(v)}`);
    return x;
  }
  return fallback;
}

/** This process's place in the ring, from the environment (a single rank when nothing is set). */
export function rankFromEnv(env: Record<string, string | undefined> = process.env): RankInfo {
  const size = intVar(env, ['FA_WORLD_SIZE', 'WORLD_SIZE'], 1);
  const rank = intVar(env, ['FA_RANK', 'RANK'], 0);
  const localRank = intVar(env, ['FA_LOCAL_RANK', 'LOCAL_RANK'], rank);
  if (size < 1 || rank >= size) throw new FAError('E_ARG', `rank ${rank} is outside a world of ${size} ranks (FA_RANK, FA_WORLD_SIZE)`);
  return { rank, size, localRank };
}

export function encodeNcclId(id: Uint8Array): string {
  return Array.from(id, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function decodeNcclId(hex: string, what = 'FA_NCCL_ID'): Uint8Array {
  const s = hex.trim();
  if (!/^[0-9a-fA-F]*$/.test(s) || s.length !== 2 * NCCL_ID_BYTES) throw new FAError('E_ARG', `${what} must be ${2 * NCCL_ID_BYTES} hex digits (NCCL's 128-byte unique id), got ${s.length} characters`);
  const out = new Uint8Array(NCCL_ID_BYTES);
  for (let i = 0; i < NCCL_ID_BYTES; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export interface ShareIdOptions {
  readonly rank: number;
  readonly size: number;
  /** Makes a new id (rank 0, or a single rank); nccl.uniqueId in production. */
  readonly makeId: () => Uint8Array;
  /** The id as hex (FA_NCCL_ID). */
  readonly idHex?: string;
  /** The file to share it through (FA_NCCL_ID_FILE). */
  readonly idFile?: string;
  /** How long ranks > 0 wait for the file (default 120 s). */
  readonly timeoutMs?: number;
  readonly pollMs?: number;
}

/** The unique id every rank of the ring must pass to ncclCommInitRank. */
export async function shareNcclId(o: ShareIdOptions): Promise<Uint8Array> {
  if (o.idHex !== undefined && o.idHex !== '') return decodeNcclId(o.idHex);
  if (!o.idFile) {
    if (o.size === 1) return o.makeId();
    throw new FAError('E_ARG', `${o.size} ranks need a rendezvous: set FA_NCCL_ID_FILE to a fresh path every rank can read (the launcher does), or FA_NCCL_ID to the id in hex`);
  }
  const file = o.idFile;
  if (o.rank === 0) {
    const id = o.makeId();
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, `${encodeNcclId(id)}\n`, { mode: 0o600 });
      renameSync(tmp, file);
    } catch (e) {
      throw new FAError('E_IO', `rank 0 could not write the NCCL id to ${file}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    return id;
  }
  const timeout = o.timeoutMs ?? 120_000;
  const poll = o.pollMs ?? 50;
  const t0 = Date.now();
  for (;;) {
    if (existsSync(file)) {
      const text = readFileSync(file, 'utf8');
      if (text.endsWith('\n')) return decodeNcclId(text, file);
    }
    if (Date.now() - t0 > timeout) throw new FAError('E_DEVICE', `rank ${o.rank}: rank 0 did not write the NCCL id to ${file} within ${Math.round(timeout / 1000)} s; start rank 0 with the same FA_NCCL_ID_FILE, or set FA_NCCL_ID`);
    await new Promise((r) => setTimeout(r, poll));
  }
}

/** Rank 0 removes the id file once every rank has joined (best effort). */
export function removeNcclIdFile(file: string | undefined): void {
  if (file) rmSync(file, { force: true });
}
