/**
 * The NCCL communicator of ring attention: core's Communicator over NCCL send/recv between
 * one process per GPU. NCCL is loaded at run time (csrc/nccl_comm.cc): from FA_NCCL_LIB when
 * set (a file, or a directory holding libnccl.so.2), else from the usual places — the loader's
 * search path (LD_LIBRARY_PATH, ldconfig), the system library directories, CUDA_HOME, and the
 * nvidia/nccl/lib of Python environments (a PyTorch install brings one). Without NCCL,
 * ncclStatus() and createNcclCommunicator() say what was tried and how to fix it.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { FAError, ringNeighbours, type Communicator, type Tensor } from '@fa/core';
import { CudaTensor, toFAError, type CudaBackend } from '../backend.js';
import { loadNative, type NativeNccl, type NativeNcclComm } from '../native.js';
import { rankFromEnv, removeNcclIdFile, shareNcclId } from './rendezvous.js';

const SONAME = 'libnccl.so.2';

function sitePackages(prefix: string): string[] {
  const out: string[] = [];
  for (const lib of ['lib', 'lib64']) {
    const dir = join(prefix, lib);
    let names: string[] = [];
    try {
      names = readdirSync(dir).filter((n) => /^python3(\.\d+)?$/.test(n));
    } catch {
      continue;
    }
    for (const py of names) for (const sp of ['site-packages', 'dist-packages']) out.push(join(dir, py, sp));
  }
  return out;
}

function optVenvs(): string[] {
  try {
    return readdirSync('/opt').flatMap((n) => [join('/opt', n), join('/opt', n, '.venv')]);
  } catch {
    return [];
  }
}

/**
 * Where to look for NCCL, in order: FA_NCCL_LIB alone when it is set; otherwise the soname
 * (the dynamic loader's own search) and every existing libnccl.so.2 in the usual places.
 */
export function ncclCandidates(env: Record<string, string | undefined> = process.env): string[] {
  const lib = env.FA_NCCL_LIB;
  if (lib) {
    try {
      return [statSync(lib).isDirectory() ? join(lib, SONAME) : lib];
    } catch {
      return [lib];
    }
  }
  const dirs = ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib', '/usr/local/lib', '/usr/local/cuda/lib64'];
  if (env.CUDA_HOME) dirs.push(join(env.CUDA_HOME, 'lib64'));
  const prefixes = [env.VIRTUAL_ENV, env.CONDA_PREFIX, '/usr', '/usr/local', '/opt/conda', ...optVenvs(), join(homedir(), '.local')].filter((x): x is string => !!x);
  for (const p of prefixes) for (const sp of sitePackages(p)) dirs.push(join(sp, 'nvidia', 'nccl', 'lib'));
  const files = dirs.map((d) => join(d, SONAME)).filter((f) => existsSync(f));
  return [...new Set([SONAME, ...files])];
}

export type NcclStatus = { readonly available: true; readonly version: string; readonly path: string } | { readonly available: false; readonly reason: string };

function nativeNccl(): NativeNccl | string {
  const n = loadNative();
  if (!n.ok) return n.reason.replace(/^unavailable:\s*/, '');
  if (!n.binding.nccl) return 'the CUDA addon predates NCCL support; rebuild it (npm run build:native)';
  return n.binding.nccl;
}

/** Loads NCCL (once; a success is remembered) and says which, or why none. */
export function ncclStatus(env: Record<string, string | undefined> = process.env): NcclStatus {
  const nccl = nativeNccl();
  if (typeof nccl === 'string') return { available: false, reason: `NCCL cannot be used: ${nccl}` };
  const candidates = ncclCandidates(env);
  const r = nccl.load(candidates);
  if (r.ok) return { available: true, version: r.version!, path: r.path! };
  const tried = r.tried.map((t) => `${t.path} (${t.error})`).join('; ');
  const fix = env.FA_NCCL_LIB
    ? 'point FA_NCCL_LIB at libnccl.so.2 (a file, or the directory holding it), or unset it to search the usual places'
    : 'install NCCL (the libnccl2 package, or pip install nvidia-nccl-cu12, which PyTorch brings) or set FA_NCCL_LIB to the path of libnccl.so.2';
  return { available: false, reason: `NCCL (${SONAME}) was not found or is unusable: tried ${tried || 'nothing'}; ${fix}` };
}

/** One rank of an NCCL ring over the device tensors of one CudaBackend. */
export class NcclCommunicator implements Communicator {
  readonly rank: number;
  readonly size: number;
  readonly #next: number;
  readonly #prev: number;

  constructor(
    private readonly native: NativeNcclComm,
    private readonly backend: CudaBackend,
  ) {
    this.rank = native.rank;
    this.size = native.size;
    const { next, prev } = ringNeighbours(this.rank, this.size);
    this.#next = next;
    this.#prev = prev;
  }

  #handles(ts: readonly Tensor[], what: string) {
    return ts.map((t, i) => {
      if (!(t instanceof CudaTensor) || t.owner !== this.backend) throw new FAError('E_ARG', `${what}[${i}] must be a device tensor of the communicator's CUDA backend`);
      if (t.disposed) throw new FAError('E_ARG', `${what}[${i}] was already disposed`);
      return t.handle;
    });
  }

  async exchange(send: readonly Tensor[], recv: readonly Tensor[]): Promise<void> {
    const s = this.#handles(send, 'send');
    const r = this.#handles(recv, 'recv');
    try {
      await this.native.exchange(s, r, this.#next, this.#prev);
    } catch (e) {
      throw toFAError(e);
    }
  }

  abort(reason: unknown): void {
    this.native.abort(reason instanceof Error ? reason.message : String(reason));
  }

  /** Whether an error, a timeout or abort() ended the communicator. */
  get aborted(): boolean {
    return this.native.isAborted();
  }

  /** Ends the communicator after its pending exchanges (ncclCommDestroy). */
  async destroy(): Promise<void> {
    try {
      await this.native.destroy();
    } catch (e) {
      throw toFAError(e);
    }
  }
}

export interface NcclCommunicatorOptions {
  /** Default: from the environment (rankFromEnv). */
  readonly rank?: number;
  readonly size?: number;
  /** The unique id, as bytes or hex (default FA_NCCL_ID). */
  readonly id?: Uint8Array | string;
  /** Rendezvous file (default FA_NCCL_ID_FILE). */
  readonly idFile?: string;
  /** How long ranks > 0 wait for rank 0's id file (default 120 s). */
  readonly timeoutMs?: number;
  readonly env?: Record<string, string | undefined>;
}

/**
 * Joins the ring: loads NCCL, agrees on the unique id (rendezvous.ts) and initialises this
 * rank on the backend's GPU. Every rank must call it; it resolves once all have joined.
 * Throws FAError E_UNSUPPORTED (with what was tried) when NCCL is not available.
 */
export async function createNcclCommunicator(backend: CudaBackend, o: NcclCommunicatorOptions = {}): Promise<NcclCommunicator> {
  const env = o.env ?? process.env;
  const status = ncclStatus(env);
  if (!status.available) throw new FAError('E_UNSUPPORTED', `context parallelism over NCCL: ${status.reason}`);
  const nccl = nativeNccl() as NativeNccl;
  const fromEnv = o.rank === undefined || o.size === undefined ? rankFromEnv(env) : undefined;
  const rank = o.rank ?? fromEnv!.rank;
  const size = o.size ?? fromEnv!.size;
  if (!(Number.isSafeInteger(size) && size >= 1 && Number.isSafeInteger(rank) && rank >= 0 && rank < size)) throw new FAError('E_ARG', `rank ${rank} of ${size} is not a place in a ring`);
  const idFile = o.idFile ?? env.FA_NCCL_ID_FILE;
  const id =
    o.id instanceof Uint8Array
      ? o.id
      : await shareNcclId({ rank, size, makeId: () => nccl.uniqueId(), idHex: typeof o.id === 'string' ? o.id : env.FA_NCCL_ID, idFile, timeoutMs: o.timeoutMs });
  let native: NativeNcclComm;
  try {
    native = await nccl.init({ device: backend.deviceIndex, rank, size, id });
  } catch (e) {
    throw toFAError(e);
  }
  if (rank === 0 && !(o.id instanceof Uint8Array) && !(o.id ?? env.FA_NCCL_ID)) removeNcclIdFile(idFile);
  return new NcclCommunicator(native, backend);
}
