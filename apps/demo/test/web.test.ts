/**
 * The web page in headless Chromium: build it with Vite, serve dist-web/ from a tiny HTTP
 * server on 127.0.0.1 (a random port), open it with playwright-core driving Debian's chromium
 * (WebGPU through SwiftShader with --enable-unsafe-webgpu), run a small configuration, and check
 * that the page reports a verified exact result and that the SVG charts rendered. Saves a
 * screenshot (and the engine that ran) under test-output/.
 *
 * The server sends COOP/COEP (cross-origin isolation, as the Vite servers and web/public/_headers
 * do), except under /plain/, which serves the same files without them: there the wasm engine has
 * no SharedArrayBuffer and must run on one thread and say so. SwiftShader is a software adapter,
 * so on the page's auto choice the wasm engine runs, with threads.
 *
 * Chromium comes from scripts/setup-webgpu.sh (apt: chromium). Without it the test is skipped
 * and says why; FA_CHROMIUM overrides the path.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { availableParallelism, tmpdir } from 'node:os';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const APP = fileURLToPath(new URL('..', import.meta.url));
const DIST = join(APP, 'dist-web');
const OUT = join(APP, 'test-output');
const CHROMIUM = process.env.FA_CHROMIUM ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.warn(`web.test: skipped: no Chromium at ${CHROMIUM} (bash scripts/setup-webgpu.sh installs it; FA_CHROMIUM overrides)`);

const TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml', '.json': 'application/json', '.wasm': 'application/wasm' };

let server: Server | undefined;
let base = '';
const requests: string[] = [];

function serve(root: string): Promise<string> {
  server = createServer((req, res) => {
    requests.push(req.url ?? '');
    let rel = normalize(decodeURIComponent(new URL(req.url ?? '/', 'http://127.0.0.1').pathname)).replace(/^[/\\]+/, '');
    const plain = rel === 'plain' || rel.startsWith('plain/');
    if (plain) rel = rel.replace(/^plain\/?/, '');
    rel ||= 'index.html';
    const isolation = plain ? {} : { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' };
    const path = join(root, rel);
    if (!path.startsWith(root + sep) && path !== root) {
      res.writeHead(403).end();
      return;
    }
    readFile(path).then(
      (body) => res.writeHead(200, { 'content-type': TYPES[extname(path)] ?? 'application/octet-stream', 'cache-control': 'no-store', ...isolation }).end(body),
      () => res.writeHead(404).end(),
    );
  });
  return new Promise((resolve) => server!.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server!.address() as { port: number }).port}/`)));
}

describe.skipIf(!haveChromium)('the web page in headless Chromium', () => {
  beforeAll(async () => {
    const { build } = await import('vite');
    await build({ configFile: join(APP, 'vite.config.ts'), logLevel: 'warn' });
    base = await serve(DIST);
    mkdirSync(OUT, { recursive: true });
  }, 180_000);
  afterAll(() => {
    server?.close();
  });

  /** Opens `path` (relative to the server), waits for the autorun, checks the verdict and charts. */
  async function runPage(path: string, shot: string): Promise<{ engine: string; engineText: string; part2: string }> {
    const { chromium } = await import('playwright-core');
    const profile = mkdtempSync(join(process.env.TMPDIR ?? tmpdir(), 'fa-web-test-'));
    const ctx = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1100, height: 900 },
      args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const errors: string[] = [];
    try {
      const page = await ctx.newPage();
      page.on('pageerror', (e) => errors.push(e.message));
      const foreign: string[] = [];
      page.on('request', (r) => {
        const u = r.url();
        if (!u.startsWith(base) && !/^(data|blob):/.test(u)) foreign.push(u);
      });
      await page.goto(`${base}${path}`);
      await page.waitForSelector('body[data-status="done"], body[data-status="error"]', { timeout: 240_000 });
      const status = await page.getAttribute('body', 'data-status');
      const engine = (await page.getAttribute('#engine', 'data-engine')) ?? 'none';
      const engineText = (await page.textContent('#engine')) ?? '';
      const part2 = (await page.textContent('#part2 pre')) ?? '';
      const part3 = (await page.textContent('#part3 pre')) ?? '';
      // let the tile-by-tile animation reach its last step before the picture
      await page.waitForSelector('#walk[data-step="6"]', { timeout: 30_000 });
      await page.screenshot({ path: join(OUT, `${shot}.png`), fullPage: true });
      writeFileSync(join(OUT, `${shot}-engine.txt`), `${engine}\n${engineText}\n\n${part2}\n\n${part3}\n`);
      console.log(`web.test (${path}): engine ${engine}: ${engineText}\n${part2}`);

      expect(status, part2).toBe('done');
      expect(await page.getAttribute('#verdict', 'data-verified')).toBe('true');
      expect(await page.textContent('#verdict')).toMatch(/verified exact/);
      expect(part3).toMatch(/Verified exact/);
      // the charts: memory, traffic, intensity and throughput, each with drawn content
      for (const id of ['chart-memory', 'chart-io', 'chart-intensity', 'chart-throughput']) {
        const n = await page.locator(`svg#${id} polyline, svg#${id} circle, svg#${id} rect.bar`).count();
        expect(n, id).toBeGreaterThan(0);
      }
      expect(await page.locator('#walk svg rect').count()).toBeGreaterThan(40);
      if (path.includes('train=')) {
        // part 9: the GPT trained in the engine worker (the loss fell) and its cached generation agrees
        await page.waitForSelector('body[data-train="done"], body[data-train="failed"], body[data-train="error"]', { timeout: 120_000 });
        const part9 = (await page.textContent('#part9 pre')) ?? '';
        console.log(`web.test (${path}) part 9:\n${part9}`);
        expect(await page.getAttribute('body', 'data-train'), part9).toBe('done');
        expect(part9).toMatch(/Checked: greedy generation with the KV cache gives the tokens/);
      }
      expect(errors).toEqual([]);
      // the page asks nothing of anyone but the local server
      expect(requests.length).toBeGreaterThan(0);
      expect(foreign).toEqual([]);
      return { engine, engineText, part2 };
    } finally {
      await ctx.close();
      rmSync(profile, { recursive: true, force: true });
    }
  }

  it('runs a small configuration, verifies it against float64 and draws the charts (auto: wasm with threads, SwiftShader being a software adapter)', async () => {
    const r = await runPage('?T=256&D=32&autorun=1&train=3', 'web');
    expect(['webgpu', 'wasm', 'cpu']).toContain(r.engine);
    if (r.engine === 'wasm') {
      // cross-origin isolated: the engine's own worker threads
      expect(r.engineText).toMatch(availableParallelism() > 1 ? /WebAssembly (SIMD128|relaxed SIMD) ×\d+ threads/ : /×1 thread/);
      expect(r.engineText).not.toMatch(/one thread/);
      expect(r.engineText).toMatch(/software adapter/);
    }
  }, 300_000);

  it('runs the wasm engine on one thread where the page is not cross-origin isolated, and says why', async () => {
    const r = await runPage('plain/?T=256&D=32&autorun=1&engine=wasm', 'web-plain');
    expect(r.engine).toBe('wasm');
    expect(r.engineText).toMatch(/×1 thread \(one thread: .*cross-origin isolated/);
  }, 300_000);

  it('runs WebGPU when asked for, even on a software adapter', async () => {
    const r = await runPage('?T=256&D=32&autorun=1&engine=webgpu', 'web-webgpu');
    expect(r.engine).toBe('webgpu');
  }, 300_000);

  it('percall.html measures the WebGPU engine\'s host cost per call in the browser', async () => {
    const { chromium } = await import('playwright-core');
    const profile = mkdtempSync(join(process.env.TMPDIR ?? tmpdir(), 'fa-web-test-'));
    const ctx = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run'] });
    try {
      const page = await ctx.newPage();
      await page.goto(`${base}percall.html?calls=60`);
      await page.waitForSelector('body[data-status="done"], body[data-status="error"]', { timeout: 240_000 });
      const text = (await page.textContent('#out')) ?? '';
      console.log(`web.test percall.html:\n${text}`);
      writeFileSync(join(OUT, 'percall.txt'), `${text}\n`);
      expect(await page.getAttribute('body', 'data-status'), text).toBe('done');
      const r = (await page.evaluate('window.__perCall')) as { rows: { awaited: number; pipelined: number; sync: number }[] };
      expect(r.rows.length).toBe(2);
      for (const row of r.rows) expect(row.awaited).toBeGreaterThan(0);
    } finally {
      await ctx.close();
      rmSync(profile, { recursive: true, force: true });
    }
  }, 300_000);
});
