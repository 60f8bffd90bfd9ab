/**
 * A slice of the conformance kit (forward and backward, the KV-cache cases with host and with
 * device caches, and the extra checks) in headless Chromium, twice: on a page
 * served with COOP/COEP (cross-origin isolated: shared memory, the engine's own Web Workers, every
 * case through them) and on the same page without (one thread, unshared memory, the other
 * binary). The page and the engine's worker are bundled with esbuild, served with the .wasm
 * binaries on 127.0.0.1 by a tiny HTTP server, and driven by playwright-core with Debian's
 * chromium (FA_CHROMIUM, default /usr/bin/chromium). Each case is its own test; without a
 * browser the tests are listed as skipped.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceCases, EXTRA_CHECKS, KV_EXTRA_CHECKS, kvCacheCases, type CaseResult } from '@fa/core/testing';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const chromiumPath = process.env.FA_CHROMIUM ?? '/usr/bin/chromium';
const COUNT = Number(process.env.FA_BROWSER_CASES ?? 48);
const SEED = 3;
const kv = kvCacheCases({ quick: true, seed: SEED }).map((c) => c.name);
const names = [
  ...conformanceCases({ count: COUNT, quick: true, seed: SEED }).map((c) => c.name),
  ...kv,
  ...kv.map((n) => `device caches: ${n}`), // page.ts DEVICE_CACHES
  ...[...EXTRA_CHECKS, ...KV_EXTRA_CHECKS].map((x) => x.name),
];
const TIMEOUT = 20 * 60_000;
const skipWhy = existsSync(chromiumPath) ? '' : `no chromium at ${chromiumPath} (run scripts/setup-webgpu.sh)`;

interface PageRun {
  results: Map<string, CaseResult>;
  device: string;
  threads: number;
  isolated: boolean;
  error: string;
}

let server: Server | undefined;
let base = '';

async function bundle(): Promise<{ page: string; worker: string }> {
  const esbuild = await import('esbuild');
  const built = await esbuild.build({
    entryPoints: { page: join(here, 'browser', 'page.ts'), worker: join(root, 'dist', 'worker.js') },
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    write: false,
    outdir: '/',
    external: ['node:*'],
    logLevel: 'error',
  });
  const text = (name: string) => built.outputFiles.find((f) => f.path.endsWith(`/${name}.js`))!.text;
  return { page: text('page'), worker: text('worker') };
}

/** /page.js, /worker.js, /wasm/*.wasm, and the page; COOP/COEP unless the path starts with /plain/. */
function serve(js: { page: string; worker: string }): Promise<string> {
  const html = '<!doctype html><meta charset="utf-8"><title>@fa/wasm conformance</title><script type="module" src="page.js"></script>';
  server = createServer((req, res) => {
    let path = new URL(req.url ?? '/', 'http://127.0.0.1').pathname;
    const plain = path.startsWith('/plain/');
    if (plain) path = path.slice('/plain'.length);
    const headers: Record<string, string> = plain ? {} : { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' };
    let body: string | Buffer | undefined;
    let type = 'text/html';
    if (path === '/page.js' || path === '/worker.js') {
      body = path === '/page.js' ? js.page : js.worker;
      type = 'text/javascript';
    } else if (/^\/wasm\/fa-[a-z0-9]+-(mt|st)\.wasm$/.test(path)) {
      body = readFileSync(join(root, path));
      type = 'application/wasm';
    } else if (path === '/') body = html;
    if (body === undefined) res.writeHead(404).end();
    else res.writeHead(200, { 'content-type': type, ...headers }).end(body);
  });
  return new Promise((r) => server!.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${(server!.address() as { port: number }).port}`)));
}

async function runPage(path: string): Promise<PageRun> {
  const profile = mkdtempSync(join(process.env.TMPDIR ?? tmpdir(), 'fa-chromium-'));
  const { chromium } = await import('playwright-core');
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let pageError = '';
  try {
    const page = ctx.pages()[0] ?? (await ctx.newPage());
    page.on('console', (m) => {
      if (m.text().startsWith('page:')) console.log(m.text());
    });
    page.on('pageerror', (e) => (pageError ||= e.message));
    await page.goto(`${base}${path}?count=${COUNT}&seed=${SEED}`);
    await page.waitForFunction(() => (window as unknown as { __fa?: { done: boolean } }).__fa?.done === true, undefined, { timeout: TIMEOUT, polling: 500 });
    const st = (await page.evaluate(() => (window as unknown as { __fa: unknown }).__fa)) as { device?: string; threads?: number; isolated?: boolean; error?: string; results: CaseResult[] };
    return { results: new Map(st.results.map((r) => [r.name, r])), device: st.device ?? '', threads: st.threads ?? -1, isolated: st.isolated === true, error: st.error ?? pageError };
  } finally {
    await ctx.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

for (const mode of ['isolated', 'plain'] as const) {
  describe(`wasm in headless chromium, ${mode === 'isolated' ? 'cross-origin isolated (threads)' : 'not cross-origin isolated (one thread)'}`, () => {
    if (skipWhy) {
      it.skip(`skipped: ${skipWhy}`, () => undefined);
      return;
    }
    let run: PageRun;
    beforeAll(async () => {
      if (!base) base = await serve(await bundle());
      run = await runPage(mode === 'isolated' ? '/' : '/plain/');
      const r = [...run.results.values()];
      console.log(`chromium wasm (${mode}) on ${run.device}: ${r.filter((x) => x.pass && !x.skipped).length} passed, ${r.filter((x) => x.skipped).length} skipped, ${r.filter((x) => !x.pass).length} failed`);
    }, TIMEOUT);
    afterAll(() => {
      if (mode === 'plain') server?.close();
    });

    it(mode === 'isolated' ? 'runs on worker threads over shared memory' : 'runs on one thread and its device says why', () => {
      expect(run.error, 'the page threw').toBe('');
      expect(run.isolated).toBe(mode === 'isolated');
      if (mode === 'isolated') {
        expect(run.threads).toBeGreaterThan(0);
        expect(run.device).not.toMatch(/one thread/);
      } else {
        expect(run.threads).toBe(0);
        expect(run.device).toMatch(/×1 thread \(one thread: .*cross-origin isolated/);
      }
    });

    for (const name of names) {
      it(name, (ctx) => {
        expect(run.error, 'the page threw').toBe('');
        const r = run.results.get(name);
        expect(r, 'the page produced no result for this case').toBeDefined();
        if (r!.skipped) {
          ctx.skip(`skipped: ${r!.reason}`);
          return;
        }
        expect(r!.pass, r!.message).toBe(true);
      });
    }
  });
}
