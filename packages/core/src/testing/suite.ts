/**
 * defineConformanceSuite: registers one test per conformance case (dense and KV-cache, and per
 * extra check) with
 * the test framework the caller passes in — vitest's { describe, it, expect, afterAll } — so
 * that @fa/core does not depend on a test framework. Skipped cases stay visible: with a backend
 * instance they are registered as skipped tests whose title carries the engine's reason; with a
 * getter they are skipped at run time through the test context (ctx.skip(reason)). A summary
 * line "conformance <backend> (<device>): N passed, M skipped (reasons…), F failed" is printed
 * at the end.
 */
import type { AttentionBackend, Support } from '../backend.js';
import { caseProblem, conformanceCases } from './cases.js';
import { checkCase, EXTRA_CHECKS, formatSummary, kvCasesOf, kvEnabled, summarize, type CaseResult, type ConformanceOptions } from './check.js';
import { kvCacheCaseInputs } from './kvcache-cases.js';
import { checkKVCacheCase, KV_EXTRA_CHECKS } from './kvcache-check.js';

/** The part of a test context the suite uses (vitest's TestContext fits). */
export interface SuiteTestContext {
  readonly skip?: (note?: string) => void;
}

/** The test-framework functions the suite needs (vitest's fit). */
export interface SuiteApi {
  readonly describe: (name: string, fn: () => void) => void;
  readonly it: {
    (name: string, fn: (ctx: SuiteTestContext) => unknown, timeout?: number): void;
    readonly skip: (name: string, fn: () => unknown) => void;
  };
  /** When given, failures are reported through expect(pass, message).toBe(true). */
  readonly expect?: (actual: unknown, message?: string) => { toBe(expected: unknown): void };
  /** When given, the summary line is printed from afterAll; otherwise from a last test. */
  readonly afterAll?: (fn: () => unknown) => void;
}

export interface SuiteOptions extends ConformanceOptions {
  /** The label in titles and the summary (default: the backend's name, or "backend" for a getter). */
  readonly name?: string;
  /** Per-test timeout in ms (default 120000). */
  readonly timeout?: number;
  /** Where the summary line goes (default console.log). */
  readonly log?: (line: string) => void;
}

export type BackendSource = AttentionBackend | (() => AttentionBackend | Promise<AttentionBackend>);

/**
 * Registers the conformance suite: describe(`conformance <name>`) with one test per case (title
 * = the case name), the extra checks, and the summary. Prefer passing a backend instance
 * (vitest allows top-level await in test files) so unsupported cases are listed as skipped
 * with their reason in the title.
 */
export function defineConformanceSuite(source: BackendSource, api: SuiteApi, opts: SuiteOptions = {}): void {
  const cases = opts.cases ?? conformanceCases(opts);
  const instance = typeof source === 'function' ? undefined : source;
  const label = opts.name ?? (instance ? instance.name : 'backend');
  let device = instance ? instance.device : '?';
  let pending: Promise<AttentionBackend> | undefined;
  const get = (): Promise<AttentionBackend> => (pending ??= Promise.resolve(instance ?? (source as () => AttentionBackend | Promise<AttentionBackend>)()));
  const timeout = opts.timeout ?? 120_000;
  const results: CaseResult[] = [];
  const log = opts.log ?? ((line: string) => console.log(line));
  const report = (r: CaseResult) => {
    if (api.expect) api.expect(r.pass, r.message).toBe(true);
    else if (!r.pass) throw new Error(r.message);
  };
  const finish = () => log(formatSummary(summarize({ name: label, device }, results)));
  const register = (name: string, support: () => Support, run: (b: AttentionBackend) => Promise<CaseResult>) => {
    if (instance) {
      let sup: Support = { ok: true };
      try {
        sup = support();
      } catch {
        sup = { ok: true }; // the run will report the throw
      }
      if (!sup.ok && typeof sup.reason === 'string' && sup.reason.trim()) {
        const reason = sup.reason.trim();
        results.push({ name, pass: true, skipped: true, reason, metrics: [], message: `skipped: ${reason}`, ms: 0 });
        api.it.skip(`${name} — skipped: ${reason}`, () => undefined);
        return;
      }
    }
    api.it(
      name,
      async (ctx) => {
        const b = await get();
        device = b.device;
        const r = await run(b);
        results.push(r);
        if (r.skipped) {
          ctx?.skip?.(`skipped: ${r.reason}`);
          return;
        }
        report(r);
      },
      timeout,
    );
  };
  api.describe(`conformance ${label}`, () => {
    for (const c of cases) register(c.name, () => instance!.supports(caseProblem(c)), (b) => checkCase(b, c, opts));
    for (const c of kvCasesOf(opts)) register(c.name, () => instance!.supportsKVCache(kvCacheCaseInputs(c).problem), (b) => checkKVCacheCase(b, c, opts));
    if (opts.extras !== false) {
      const extras = [...EXTRA_CHECKS, ...(kvEnabled(opts) ? KV_EXTRA_CHECKS : [])];
      for (const x of extras) register(x.name, () => ({ ok: true }), (b) => x.run(b, opts));
    }
    if (api.afterAll) api.afterAll(finish);
    else api.it(`conformance ${label}: summary`, finish);
  });
}
