/**
 * The registry: engines are separate packages that call registerBackend() when imported; the
 * registry creates them lazily, once, in priority order, and remembers why one could not start.
 *
 *   resolveBackend('cuda')            that engine (E_DEVICE says why it cannot start)
 *   resolveBackend()                  every engine, behind one backend that runs each call on the
 *                                     highest-priority engine whose supports() accepts it
 *   resolveBackendFor(problem)        that engine for one problem (a dense call's or a KV-cache
 *                                     call's), and why the ones above it were passed over
 */
import { FAError, isFAError } from './errors.js';
import type { AttentionBackend } from './backend.js';
import { AutoBackend, type AutoBackendOptions } from './auto-backend.js';
import { askSupports, chooseEngine, NO_BACKEND_REGISTERED, type ChoiceProblem, type EngineCandidate, type Resolution } from './choose.js';
import { describeProblem, type AttentionOptions } from './problem.js';
import type { Tensor } from './tensor.js';

export type BackendFactory = () => Promise<AttentionBackend>;

interface Entry {
  name: string;
  priority: number;
  factory: BackendFactory;
  instance?: Promise<AttentionBackend>;
  failure?: string;
  /** Auto backends holding the started instance; it is disposed when the last one lets go. */
  holders: number;
  /** Handed to a caller by name (resolveBackend('cuda'), resolveBackendFor): the caller owns its life. */
  pinned: boolean;
}

const registry = new Map<string, Entry>();

/**
 * Registers an engine. Higher priority wins in resolveBackend(). Registering a name again
 * replaces the entry (and forgets a cached instance or failure).
 */
export function registerBackend(name: string, factory: BackendFactory, priority = 0): void {
  registry.set(name, { name, priority, factory, holders: 0, pinned: false });
}

export function unregisterBackend(name: string): void {
  registry.delete(name);
}

export function registeredBackendNames(): string[] {
  return [...registry.values()].sort((a, b) => b.priority - a.priority).map((e) => e.name);
}

/** The reason an engine gave, without a leading "unavailable:" (the registry says that itself). */
function reasonOf(e: unknown): string {
  const msg = isFAError(e) || e instanceof Error ? e.message : String(e);
  return msg.replace(/^unavailable:\s*/i, '');
}

async function instantiate(e: Entry): Promise<AttentionBackend> {
  if (e.failure !== undefined) throw new FAError('E_DEVICE', `backend ${e.name} is unavailable: ${e.failure}`);
  if (!e.instance) {
    e.instance = e.factory().catch((err: unknown) => {
      e.failure = reasonOf(err);
      e.instance = undefined;
      throw new FAError('E_DEVICE', `backend ${e.name} is unavailable: ${e.failure}`, { cause: err });
    });
  }
  return e.instance;
}

/** Starts one engine; never throws (a failure is the candidate's reason). */
async function start(name: string): Promise<EngineCandidate> {
  const e = registry.get(name)!;
  try {
    return { name, backend: await instantiate(e) };
  } catch (err) {
    return { name, reason: e.failure ?? reasonOf(err) };
  }
}

/** The candidate names, in order: every registered engine by priority, or those named (checked). */
function candidateNames(preferred: string | readonly string[] | undefined): string[] {
  if (preferred === undefined || preferred === 'auto') return registeredBackendNames();
  const names = typeof preferred === 'string' ? [preferred] : [...preferred];
  for (const n of names) {
    if (!registry.has(n)) throw new FAError('E_ARG', `unknown backend "${n}"; registered: ${registeredBackendNames().join(', ') || 'none'}`);
  }
  return names;
}

/** Disposes a started engine and forgets it, so the next resolve starts it afresh. */
async function disposeEntry(e: Entry): Promise<void> {
  const inst = e.instance;
  e.holders = 0;
  e.pinned = false;
  if (!inst) return;
  e.instance = undefined;
  await inst.then((b) => b.dispose(), () => undefined);
}

/** An auto backend takes a hold on each engine it started... */
function hold(name: string): void {
  const e = registry.get(name);
  if (e) e.holders++;
}
/** ...and lets go when disposed: the engine is disposed when no auto backend holds it and no
 * caller was handed it by name (one auto backend's dispose() must not pull an engine from under
 * another, or from under `resolveBackend('cpu')`'s caller). */
async function release(name: string): Promise<void> {
  const e = registry.get(name);
  if (!e || !e.instance) return;
  e.holders = Math.max(0, e.holders - 1);
  if (e.holders === 0 && !e.pinned) await disposeEntry(e);
}

function pin(name: string): void {
  const e = registry.get(name);
  if (e) e.pinned = true;
}

/**
 * A backend to compute with.
 * - A name ('cpu', 'webgpu', 'cuda'): that engine, started once and shared; FAError E_DEVICE says
 *   why it cannot start, E_ARG names an unregistered one. The caller owns it from then on: auto
 *   backends that share it never dispose it.
 * - Nothing, 'auto', or an array of names in order of preference: an "auto" backend over every
 *   registered engine (or those named) that starts. Each forward/backward runs on the
 *   highest-priority engine whose supports() accepts its problem, so the same program runs on
 *   any machine (an engine that declines f32, say, hands f32 calls to the next one, with one
 *   note through `options.onFallback`). Rejects with E_DEVICE when no candidate starts. Its
 *   dispose() lets go of the engines it started; an engine is disposed when no auto backend holds
 *   it and no caller was handed it by name (resetBackends() disposes them all).
 */
export async function resolveBackend(preferred?: string | readonly string[], options: AutoBackendOptions = {}): Promise<AttentionBackend> {
  const names = candidateNames(preferred);
  if (typeof preferred === 'string' && preferred !== 'auto') {
    const c = await start(names[0]);
    if (c.backend) {
      pin(c.name);
      return c.backend;
    }
    throw new FAError('E_DEVICE', `no backend is available (${c.name}: ${c.reason})`);
  }
  const candidates: EngineCandidate[] = [];
  for (const n of names) candidates.push(await start(n));
  if (!candidates.some((c) => c.backend)) {
    throw new FAError('E_DEVICE', names.length === 0 ? NO_BACKEND_REGISTERED : `no backend is available (${candidates.map((c) => `${c.name}: ${c.reason}`).join('; ')})`);
  }
  const auto = new AutoBackend(candidates, options, release);
  for (const c of candidates) if (c.backend) hold(c.name);
  return auto;
}

/**
 * What to choose an engine for: a problem from describeProblem() or describeKVCacheProblem()
 * (then supportsKVCache() decides), or a dense call's tensors and options.
 */
export type ProblemSource = ChoiceProblem | { readonly q: Tensor; readonly k: Tensor; readonly v: Tensor; readonly opts?: AttentionOptions };

/**
 * The highest-priority engine (of every registered one, or of `options.backends` in that order)
 * whose supports() (supportsKVCache() for a KV-cache problem) accepts the problem, with the
 * reason each engine above it was passed over (unavailable, or declined). Engines are started
 * in order and only until one accepts.
 * Throws FAError: the validation error of describeProblem() for bad tensors or options;
 * E_UNSUPPORTED when every engine that starts declines; E_DEVICE when none starts.
 */
export async function resolveBackendFor(problem: ProblemSource, options: { backends?: string | readonly string[] } = {}): Promise<Resolution> {
  const p = 'q' in problem ? describeProblem(problem.q, problem.k, problem.v, problem.opts) : problem;
  const names = candidateNames(options.backends);
  const candidates: EngineCandidate[] = [];
  for (const n of names) {
    const c = await start(n);
    candidates.push(c);
    if (c.backend && askSupports(c.backend, p).ok) break; // later engines need not start
  }
  const r = chooseEngine(p, candidates);
  pin(candidates.find((c) => c.backend === r.backend)!.name);
  return r;
}

export interface BackendStatus {
  readonly name: string;
  readonly priority: number;
  readonly available: boolean;
  readonly device?: string;
  readonly reason?: string;
}

/** Every registered backend, tried (lazily, once), with its device or the reason it is unavailable. */
export async function listBackends(): Promise<BackendStatus[]> {
  const out: BackendStatus[] = [];
  for (const n of registeredBackendNames()) {
    const c = await start(n);
    const priority = registry.get(n)!.priority;
    out.push(c.backend ? { name: n, priority, available: true, device: c.backend.device } : { name: n, priority, available: false, reason: c.reason });
  }
  return out;
}

/** Disposes every instantiated backend and forgets cached failures (tests, shutdown). */
export async function resetBackends(): Promise<void> {
  for (const e of registry.values()) {
    e.failure = undefined;
    await disposeEntry(e);
  }
}
