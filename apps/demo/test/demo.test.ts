/**
 * `fa demo` and `fa bench` as black boxes (spawning dist/cli.js): every part of the story is
 * there, exactness is verified, the JSON is complete, the report is one self-contained HTML file
 * with SVG charts, and the terminal text fits 80 columns.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nativeTarget } from '@fa/wasm';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'fa-demo-test-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function fa(args: string[]): Promise<Result> {
  return new Promise((resolve, reject) => {
    // no Vulkan driver: the demo must not depend on one (and must not pick a software adapter)
    const env = { ...process.env, NODE_OPTIONS: '' };
    const p = spawn(process.execPath, [CLI, ...args], { cwd: tmp, env });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const width = (s: string) => [...s].length;

describe('fa demo', () => {
  let text: Result;
  let json: Result;
  beforeAll(async () => {
    // one text run (with the report) and one JSON run, small and on the CPU engine
    text = await fa(['demo', '--backend', 'cpu', '--tokens', '512', '--budget', '5', '--report', join(tmp, 'report.html')]);
    json = await fa(['demo', '--backend', 'cpu', '--tokens', '384', '--dim', '32', '--causal', '--json', '--rows', '40', '--train-seconds', '3']);
  }, 240_000);

  it('tells all nine parts, verified exact, in at most 80 columns', () => {
    expect(text.code, text.stderr).toBe(0);
    const out = text.stdout;
    for (const h of [
      /^1\. Naive attention at 100,000 tokens/m,
      /^2\. Exact FlashAttention on this machine/m,
      /^3\. Exactness against the float64 reference/m,
      /^4\. Memory, traffic and time/m,
      /^5\. The online softmax, step by step/m,
      /^6\. The backward pass: recompute instead of storing P/m,
      /^7\. Generating with a KV cache/m,
      /^8\. Past one GPU: context parallelism \(ring attention\)/m,
      /^9\. A model on the engines: a small GPT trains, then writes/m,
    ])
      expect(out).toMatch(h);
    expect(out).toMatch(/bf16\s+20\.0 GB\s+40\.0 GB/);
    expect(out).toMatch(/f32\s+40\.0 GB\s+80\.0 GB/);
    expect(out).toMatch(/Verified exact/);
    expect(out).toMatch(/max rises 3 → 4/);
    expect(out).toMatch(/e\^\(3−4\) = 0\.3679/);
    expect(out).toMatch(/forward\s+512 tokens/);
    expect(out).toMatch(/LSE \(f32, one a row\)/);
    // 7. generation with the cache at the run's size (--tokens 512), checked against recomputing
    expect(out).toMatch(/512 tokens of context here, 8 query heads over 2 kv heads/);
    expect(out).toMatch(/per token \(median of 8\)/);
    expect(out).toMatch(/Checked: every step equals attention recomputed over the whole sequence/);
    // 8. the zigzag plan: two ranks, half the causal pairs each, one engine call per ring step
    expect(out).toMatch(/^\s+0\s+0–24,999, 75,000–99,999\s+2,500,025,000 \(50%\)\s+1, 1$/m);
    expect(out).toMatch(/NCCL here: /);
    // 9. the GPT trains on the cpu engine's model ops and generates, checked against recomputing
    expect(out).toMatch(/every op on\s+cpu:\s+the\s+products,\s+RMSNorm,\s+SwiGLU,\s+rotary/);
    expect(out).toMatch(/Checked: greedy generation with the KV cache gives the tokens/);
    const long = out.split('\n').filter((l) => width(l) > 80);
    expect(long).toEqual([]);
  });

  it('--json gives the same story as data', () => {
    expect(json.code, json.stderr).toBe(0);
    const r = JSON.parse(json.stdout);
    expect(r.schema).toBe('fa-demo/1');
    for (const k of ['naive', 'run', 'exactness', 'memory', 'walkthrough', 'backward', 'generation', 'parallel', 'training']) expect(r).toHaveProperty(k);
    expect(r.engine).toMatchObject({ name: 'cpu', dtype: 'f32' });
    expect(r.config).toMatchObject({ T: 384, D: 32, causal: true, tokensFrom: 'flag' });
    // 1. naive at 100K
    expect(r.naive.T).toBe(100_000);
    expect(r.naive.scoresBytes).toEqual({ bf16: 2e10, f32: 4e10 });
    // 2. the run
    expect(r.run.forward.seconds).toBeGreaterThan(0);
    expect(r.run.backward.flops).toBeCloseTo(2.5 * r.run.forward.flops, 0);
    expect(r.run.calibration.length).toBeGreaterThan(0);
    // 3. exactness: 40 rows incl. the first and the last; out, lse and dq within the rule
    expect(r.exactness.rows).toBe(40);
    expect(r.exactness.sampledRows[0]).toBe(0);
    expect(r.exactness.sampledRows.at(-1)).toBe(383);
    expect(r.exactness.verified).toBe(true);
    for (const k of ['out', 'lse', 'dq']) expect(r.exactness[k].pass).toBe(true);
    expect(r.exactness.out.rel).toBeLessThan(1e-5);
    // 4. memory (measured) and the IO model
    expect(r.memory.forwardPeakExtra).toBeGreaterThanOrEqual(0);
    expect(r.memory.forwardPeakExtra).toBeLessThan(r.memory.naiveForwardBytes);
    expect(r.memory.naiveForwardBytes).toBe(2 * 384 * 384 * 4);
    expect(r.memory.io.forward.naive.bytes).toBeGreaterThan(r.memory.io.forward.flash.bytes);
    expect(r.memory.io100k.T).toBe(100_000);
    expect(r.memory.points.some((p: { naive?: number }) => (p.naive ?? 0) >= 2 * 256 * 256 * 4)).toBe(true);
    // 5. the walkthrough of the seed example
    expect(r.walkthrough.blocks).toEqual([[1, 2, 3], [4]]);
    expect(r.walkthrough.steps[1]).toMatchObject({ mBefore: 3, mAfter: 4 });
    expect(r.walkthrough.steps[1].rescale).toBeCloseTo(Math.exp(-1), 12);
    // 6. backward: P against the LSE
    expect(r.backward.storedPBytes100k).toBe(4e10);
    expect(r.backward.lseBytes100k).toBe(4e5);
    expect(r.throughput[0]).toMatchObject({ backend: 'cpu', T: 384 });
    // 7. generation with a KV cache: context 384 (--tokens), 8 steps, bytes per token as the model says
    expect(r.generation).toMatchObject({ context: 384, steps: 8, h: 8, hkv: 2, d: 32, dtype: 'f32', pass: true });
    expect(r.generation.perToken).toHaveLength(8);
    expect(r.generation.bytesPerToken).toBe(2 * 392 * 2 * 32 * 4 + 8 * 32 * 4);
    expect(r.generation.cacheBytes).toBe(2 * 2 * 256 * 2 * 32 * 4);
    expect(r.generation.scoresBytesPerHead).toBe(4 * 392 * 392);
    expect(r.generation.referenceRel).toBeLessThanOrEqual(1e-5);
    expect(r.generation.copy.bytesPerSecond).toBeGreaterThan(0);
    // 8. past one GPU
    expect(r.parallel.ranks).toBe(2);
    expect(r.parallel.perRank.reduce((a: number, x: { pairs: number }) => a + x.pairs, 0)).toBe(r.parallel.totalPairs);
    // 9. the model: it trained (the loss fell), on the cpu engine's model ops, and its cached generation agrees
    expect(r.training).toMatchObject({ attention: 'cpu', modelOps: { engine: 'cpu' }, cachedEqualsRecomputed: true });
    expect(r.training.steps).toBeGreaterThanOrEqual(2);
    expect(r.training.lastLoss).toBeLessThan(r.training.firstLoss);
    expect(r.training.naiveBytes).toBe(3 * 8 * 4 * 128 * 128 * 4);
    expect(r.training.generated.length).toBe(128 - 'the old farmer '.length);
  });

  it('--report writes one self-contained HTML file with SVG charts', () => {
    const html = readFileSync(join(tmp, 'report.html'), 'utf8');
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect(html).not.toMatch(/https?:\/\//);
    expect(html).not.toMatch(/<script|<link|<img|@import|url\(/i);
    for (const id of ['chart-memory', 'chart-io', 'chart-intensity', 'chart-throughput']) expect(html).toContain(`id="${id}"`);
    expect((html.match(/<svg /g) ?? []).length).toBe(4);
    expect(html).toMatch(/<polyline class="series"/);
    expect(html).toMatch(/<circle class="point"/);
    expect(html).toMatch(/verified exact/);
    for (const n of [1, 2, 3, 4, 5, 6, 7, 8, 9]) expect(html).toMatch(new RegExp(`<h2>${n}\\. `));
    expect(text.stdout).toMatch(/Report with charts written to/);
  });

  it('--help fits 80 columns', async () => {
    for (const cmd of ['demo', 'bench']) {
      const r = await fa([cmd, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout.split('\n').filter((l) => width(l) > 80)).toEqual([]);
    }
  });

  it('rejects bad flags in one line', async () => {
    for (const args of [['demo', '--budget', '0'], ['demo', '--tokens', '0'], ['demo', '--tokens', '5', '--seq', '5'], ['demo', '--backend', 'nope'], ['demo', '--dim', 'x']]) {
      const r = await fa(args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr).toMatch(/^fa: E_[A-Z_]+: [^\n]+\n$/);
    }
  });
});

describe('fa demo without a GPU', () => {
  it('picks a CPU engine of @fa/wasm by itself (native on Linux x86-64, else wasm), verified exact, with its memory measured', async () => {
    const r = await fa(['demo', '--tokens', '1024', '--dim', '32', '--json', '--rows', '16']);
    expect(r.code, r.stderr).toBe(0);
    const res = JSON.parse(r.stdout);
    // no Vulkan driver in this environment and no CUDA GPU: auto lands on native or wasm (above cpu)
    if (res.engine.name === 'webgpu' || res.engine.name === 'cuda') return;
    const native = (await nativeTarget()).level !== undefined;
    expect(res.engine).toMatchObject({ name: native ? 'native' : 'wasm', dtype: 'f32', onDevice: false });
    expect(res.engine.device).toMatch(native ? /^native x86-64-v[34] \((AVX-512|AVX2)\) ×\d+ thread/ : /^WebAssembly (SIMD128|relaxed SIMD) ×\d+ thread/);
    expect(res.exactness.verified).toBe(true);
    expect(res.memory.forwardPeakExtra).toBeGreaterThan(0);
  }, 240_000);
});

describe('fa bench', () => {
  it('runs on the wasm engine', async () => {
    const r = await fa(['bench', '--backend', 'wasm', '--seq', '64,128', '--dim', '16', '--repeat', '1']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^fa bench: wasm/);
    expect(r.stdout).toMatch(/WebAssembly memory/);
  });

  it('prints throughput and memory tables', async () => {
    const r = await fa(['bench', '--backend', 'cpu', '--seq', '64,128', '--dim', '16', '--repeat', '1']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^fa bench: cpu/);
    expect(r.stdout).toMatch(/^\s+T\s+fwd\s+GFLOP\/s\s+bwd\s+GFLOP\/s\s+mem fwd\s+mem bwd\s+naive S\+P/m);
    expect(r.stdout).toMatch(/^\s+128\s/m);
    expect(r.stdout).toMatch(/HBM naive/);
    expect(r.stdout.split('\n').filter((l) => width(l) > 80)).toEqual([]);
  });

  it('--json gives rows', async () => {
    const r = await fa(['bench', '--backend', 'cpu', '--seq', '64', '--heads', '2', '--dim', '8', '--repeat', '1', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const rows = JSON.parse(r.stdout);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ backend: 'cpu', T: 64, H: 2, D: 8, naiveBytes: 2 * 2 * 64 * 64 * 4 });
    expect(rows[0].forwardRate).toBeGreaterThan(0);
  });
});
