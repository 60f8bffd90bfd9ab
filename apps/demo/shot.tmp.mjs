import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
const ctx = await chromium.launchPersistentContext(mkdtempSync('/tmp/fa-tmp/pw-'), { executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1000, height: 900 }, args: ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
const page = await ctx.newPage();
await page.goto('file://' + process.argv[2]);
await page.screenshot({ path: process.argv[3], fullPage: true });
await ctx.close();
