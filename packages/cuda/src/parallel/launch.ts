/**
 * A small launcher: starts N local processes of one command, one per GPU, as NCCL programs run
 * (torchrun, mpirun). Each gets FA_RANK, FA_WORLD_SIZE, FA_LOCAL_RANK and a fresh
 * FA_NCCL_ID_FILE for the rendezvous; their output lines are prefixed with the rank. When one
 * exits with an error the others are stopped (SIGTERM, then SIGKILL after a grace period), so
 * that no rank waits forever for a dead peer. Across machines, start one process per GPU with
 * the same variables yourself (FA_RANK global, FA_LOCAL_RANK per machine, FA_NCCL_ID_FILE on a
 * shared file system or FA_NCCL_ID).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FAError } from '@fa/core';

export interface LaunchOptions {
  readonly nproc: number;
  readonly command: string;
  readonly args?: readonly string[];
  /** Extra environment for every rank. */
  readonly env?: Record<string, string>;
  /** Where output lines go (default process.stdout / stderr), already prefixed "[rank r] ". */
  readonly out?: (line: string) => void;
  readonly err?: (line: string) => void;
  /** ms between SIGTERM and SIGKILL for the ranks left when one fails (default 5000). */
  readonly graceMs?: number;
}

export interface LaunchResult {
  /** 0 when every rank succeeded, else the first failing rank's code (1 for a signal). */
  readonly code: number;
  readonly codes: readonly (number | null)[];
  readonly signals: readonly (NodeJS.Signals | null)[];
}

function lines(stream: NodeJS.ReadableStream | null, prefix: string, sink: (l: string) => void): void {
  if (!stream) return;
  let buf = '';
  stream.setEncoding('utf8');
  stream.on('data', (d: string) => {
    buf += d;
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      sink(`${prefix}${buf.slice(0, i)}`);
      buf = buf.slice(i + 1);
    }
  });
  stream.on('end', () => {
    if (buf) sink(`${prefix}${buf}`);
  });
}

/** Runs `nproc` ranks of the command and resolves when all have exited. */
export async function launchLocal(o: LaunchOptions): Promise<LaunchResult> {
  if (!(Number.isSafeInteger(o.nproc) && o.nproc >= 1)) throw new FAError('E_ARG', `nproc must be an integer >= 1, got ${String(o.nproc)}`);
  const dir = mkdtempSync(join(tmpdir(), 'fa-nccl-'));
  const idFile = join(dir, 'nccl-id');
  const out = o.out ?? ((l: string) => process.stdout.write(`${l}\n`));
  const err = o.err ?? ((l: string) => process.stderr.write(`${l}\n`));
  const codes: (number | null)[] = Array.from({ length: o.nproc }, () => null);
  const signals: (NodeJS.Signals | null)[] = Array.from({ length: o.nproc }, () => null);
  let firstFailure = -1;
  const children: ChildProcess[] = [];
  let killTimer: NodeJS.Timeout | undefined;
  const stopOthers = () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
    killTimer ??= setTimeout(() => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }, o.graceMs ?? 5000);
  };
  try {
    await Promise.all(
      Array.from({ length: o.nproc }, (_, r) =>
        new Promise<void>((resolve) => {
          const child = spawn(o.command, [...(o.args ?? [])], {
            stdio: ['ignore', 'pipe', 'pipe'],
            // a pending NCCL exchange holds a libuv worker thread while it waits; the ring keeps at
            // most two in flight beside the engine's calls, so leave room above libuv's default 4
            env: { UV_THREADPOOL_SIZE: '8', ...process.env, ...o.env, FA_RANK: String(r), FA_WORLD_SIZE: String(o.nproc), FA_LOCAL_RANK: String(r), FA_NCCL_ID_FILE: idFile },
          });
          children.push(child);
          lines(child.stdout, `[rank ${r}] `, out);
          lines(child.stderr, `[rank ${r}] `, err);
          child.on('error', (e) => {
            err(`[rank ${r}] could not start ${o.command}: ${e.message}`);
            codes[r] = 127;
            if (firstFailure < 0) firstFailure = r;
            stopOthers();
            resolve();
          });
          child.on('exit', (code, signal) => {
            codes[r] = code;
            signals[r] = signal;
            if ((code !== 0 || signal) && firstFailure < 0) {
              firstFailure = r;
              stopOthers();
            }
            resolve();
          });
        }),
      ),
    );
  } finally {
    if (killTimer) clearTimeout(killTimer);
    rmSync(dir, { recursive: true, force: true });
  }
  const code = firstFailure < 0 ? 0 : codes[firstFailure] || 1;
  return { code, codes, signals };
}
