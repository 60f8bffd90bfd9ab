import http from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { chromium } from 'playwright-core';
const root = new URL('./dist-web/', import.meta.url).pathname;
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
const srv = http.createServer(async (req, res) => {
  const p = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^\/+/, '') || 'index.html';
  try { const b = await readFile(join(root, p)); res.writeHead(200, { 'content-type': types[extname(p)] ?? 'application/octet-stream' }); res.end(b); }
  catch { res.writeHead(404); res.end(); }
});
await new Promise(r => srv.listen(0, '127.0.0.1', r));
const url = `http://127.0.0.1:${srv.address().port}/`;
const ctx = await chromium.launchPersistentContext(mkdtempSync('/tmp/fa-tmp/pw-'), { executablePath: '/usr/bin/chromium', headless: true, args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
const page = await ctx.newPage();
page.on('console', m => console.log('console:', m.text()));
page.on('pageerror', e => console.log('pageerror:', e.message));
const t0 = Date.now();
await page.goto(url + (process.argv[2] ?? '?T=256&D=32&autorun=1'));
await page.waitForSelector('body[data-status="done"], body[data-status="error"]', { timeout: 300000 });
console.log('took', Date.now() - t0, await page.locator('#engine').textContent(), await page.locator('#verdict').getAttribute('data-verified'));
console.log(await page.locator('#part2 pre').textContent());
await page.waitForTimeout(8000);
await page.screenshot({ path: '/tmp/fa-tmp/web.png', fullPage: true });
await ctx.close(); srv.close();
