/**
 * A representative slice of the conformance kit (forward and backward, and the KV-cache cases) in headless Chromium,
 * on navigator.gpu: the page is bundled with esbuild, served on 127.0.0.1 by a tiny HTTP server,
 * and driven by playwright-core with Debian's chromium (FA_CHROMIUM, default /usr/bin/chromium).
 * Each case is its own test; when no browser is installed the tests are listed as skipped.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceCases, EXTRA_CHECKS, KV_EXTRA_CHECKS, kvCacheCases, type CaseResult } from '@fa/core/testing';
import { TFJS_ROUNDTRIP } from './tfjs-roundtrip.js';

const here = dirname(fileURLToPath(import.meta.url));
const chromiumPath = process.env.FA_CHROMIUM ?? '/usr/bin/chromium';
const COUNT = Number(process.env.FA_BROWSER_CASES ?? 48);
const SEED = 3;
const names = [
  ...conformanceCases({ count: COUNT, quick: true, seed: SEED }).map((c) => c.name),
  ...kvCacheCases({ quick: true, seed: SEED }).map((c) => c.name),
  ...[...EXTRA_CHECKS, ...KV_EXTRA_CHECKS].map((x) => x.name),
  TFJS_ROUNDTRIP,
];
const TIMEOUT = 40 * 60_000;

let skipWhy = '';
if (!existsSync(chromiumPath)) skipWhy = `no chromium at ${chromiumPath} (run scripts/setup-webgpu.sh)`;

describe('webgpu in headless chromium', () => {
  if (skipWhy) {
    it.skip(`skipped: ${skipWhy}`, () => undefined);
    return;
  }
  let server: Server;
  let profile: string;
  let results = new Map<string, CaseResult>();
  let pageError = '';
  let device = '';

  beforeAll(async () => {
    const esbuild = await import('esbuild');
    const built = await esbuild.build({
      entryPoints: [join(here, 'browser', 'page.ts')],
      bundle: true,
      format: 'esm',
      platform: 'browser',
      target: 'es2022',
      write: false,
      external: ['node:*', 'webgpu'],
      logLevel: 'error',
    });
    const js = built.outputFiles[0].text;
    const html = '<!doctype html><meta charset="utf-8"><title>@fa/webgpu conformance</title><script type="module" src="/page.js"></script>';
    server = createServer((req, res) => {
      if (req.url?.startsWith('/page.js')) {
        res.writeHead(200, { 'content-type': 'text/javascript' });
        res.end(js);
      } else {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end(html);
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    process.env.TMPDIR ??= tmpdir();
    profile = mkdtempSync(join(tmpdir(), 'fa-chromium-'));
    const { chromium } = await import('playwright-core');
    const ctx = await chromium.launchPersistentContext(profile, {
      executablePath: chromiumPath,
      headless: true,
      args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = ctx.pages()[0] ?? (await ctx.newPage());
      page.on('console', (m) => {
        if (m.text().startsWith('page:')) console.log(m.text());
      });
      page.on('pageerror', (e) => (pageError ||= e.message));
      await page.goto(`http://127.0.0.1:${port}/?count=${COUNT}&seed=${SEED}`);
      await page.waitForFunction(() => (window as unknown as { __fa?: { done: boolean } }).__fa?.done === true, undefined, { timeout: TIMEOUT, polling: 1000 });
      const state = (await page.evaluate(() => (window as unknown as { __fa: unknown }).__fa)) as { device?: string; error?: string; results: CaseResult[] };
      device = state.device ?? '';
      if (state.error) pageError ||= state.error;
      results = new Map(state.results.map((r) => [r.name, r]));
    } finally {
      await ctx.close();
    }
    console.log(`chromium webgpu on ${device}: ${[...results.values()].filter((r) => r.pass && !r.skipped).length} passed, ${[...results.values()].filter((r) => r.skipped).length} skipped, ${[...results.values()].filter((r) => !r.pass).length} failed`);
  }, TIMEOUT);

  afterAll(() => {
    server?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
  });

  for (const name of names) {
    it(name, (ctx) => {
      expect(pageError, 'the page threw').toBe('');
      const r = results.get(name);
      expect(r, 'the page produced no result for this case').toBeDefined();
      if (r!.skipped) {
        ctx.skip(`skipped: ${r!.reason}`);
        return;
      }
      expect(r!.pass, r!.message).toBe(true);
    });
  }
});
