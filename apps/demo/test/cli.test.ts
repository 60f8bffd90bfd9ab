/**
 * The `fa` command as a black box: spawns the built CLI (node dist/cli.js) on NumPy-written
 * inputs and compares its .npy outputs with an independent float64 NumPy implementation
 * (test/fixtures/make_fixtures.py, which also wrote cases.json: each case's flags).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parseNpy } from '@fa/core';
import { nativeTarget } from '@fa/wasm';

// where the native engine runs (Linux x86-64 with AVX2), the fixtures run on it too
const native = (await nativeTarget()).level !== undefined;
/** The CPU engine auto lands on below a GPU engine: native where it runs, else wasm. */
const CPU_ENGINE = native ? 'native' : 'wasm';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const FIX = fileURLToPath(new URL('./fixtures/', import.meta.url));
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'fa-cli-test-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `node [...nodeArgs] dist/cli.js ...args` in the fixtures folder. */
function fa(args: string[], cwd = FIX, nodeArgs: string[] = []): Promise<Result> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [...nodeArgs, CLI, ...args], { cwd, env: { ...process.env, NODE_OPTIONS: '' } });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const readNpy = (path: string) => parseNpy(readFileSync(path), path);
let outCount = 0;
const freshOut = () => join(tmp, `out-${outCount++}`);

/** ‖x − ref‖ / ‖ref‖ over finite entries; -Infinity (rows that see no key) must match exactly. */
function relErr(x: Float32Array, ref: Float32Array): number {
  expect(x.length).toBe(ref.length);
  let num = 0;
  let den = 0;
  for (let i = 0; i < ref.length; i++) {
    if (!Number.isFinite(ref[i])) {
      expect(x[i]).toBe(ref[i]);
      continue;
    }
    num += (x[i] - ref[i]) ** 2;
    den += ref[i] ** 2;
  }
  return den === 0 ? Math.sqrt(num) : Math.sqrt(num / den);
}

interface FixtureCase {
  name: string;
  args: string[];
  dtype: 'f32' | 'f16' | 'bf16';
  outputs: string[];
  /** Options not every engine computes yet (their supports() declines them, with the reason). */
  features?: string[];
}
/** What each host engine declines today (issue 26): its fixture cases are skipped there, by name. */
const DECLINES: Record<string, readonly string[]> = {};
const { cases } = JSON.parse(readFileSync(join(FIX, 'cases.json'), 'utf8')) as { cases: FixtureCase[] };

// out, dq, dk, dv come back in the compute dtype (then widened): its rounding bounds their error.
const TOL: Record<FixtureCase['dtype'], number> = { f32: 1e-5, f16: 2e-3, bf16: 1e-2 };

describe('fa backends', () => {
  it('lists cpu as available, one line per engine', async () => {
    const r = await fa(['backends']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines.find((l) => l.startsWith('cpu'))).toMatch(/^cpu\s+CPU.*\savailable$/);
    // the WebAssembly engine is a dependency of the command and runs on every Node it supports
    expect(lines.find((l) => l.startsWith('wasm '))).toMatch(/^wasm\s+WebAssembly (SIMD128|relaxed SIMD) ×\d+ threads?\s+available$/);
    // the GPU engines are listed too: available, or why not
    for (const name of ['webgpu', 'cuda']) expect(lines.find((l) => l.startsWith(name + ' '))).toMatch(/\s(available|unavailable: .+)$/);
  });

  it('runs from the repository root as `pnpm -s fa backends`', () => {
    const r = spawnSync('pnpm', ['-s', 'fa', 'backends'], { cwd: ROOT, encoding: 'utf8' });
    if (r.error) return; // no pnpm on PATH here: the node invocation above covers the command
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^cpu\s+.*available$/m);
  });
});

describe('fa run on NumPy fixtures', () => {
  it('covers every option flag', () => {
    const flags = new Set(cases.flatMap((c) => c.args.filter((a) => a.startsWith('--'))));
    for (const f of ['--causal', '--window', '--softcap', '--scale', '--alibi', '--sinks', '--dropout', '--seed', '--dropout-offset', '--cu-seqlens-q', '--cu-seqlens-k', '--dtype', '--dout']) expect(flags).toContain(f);
    for (const f of ['--k-cache', '--v-cache', '--block-table', '--cache-seqlens', '--k-new', '--v-new', '--cache-batch-idx', '--cache-leftpad', '--rotary-cos', '--rotary-sin', '--rotary-interleaved', '--v-from-k']) expect(flags).toContain(f);
    expect(cases.some((c) => c.dtype === 'bf16')).toBe(true);
  });

  for (const backend of native ? ['cpu', 'wasm', 'native'] : ['cpu', 'wasm']) for (const c of cases) {
    const declined = (c.features ?? []).filter((f) => DECLINES[backend]?.includes(f));
    (declined.length ? it.skip : it)(`${backend}: ${c.name}: ${c.args.filter((a) => a.startsWith('--') && !['--q', '--k', '--v'].includes(a)).join(' ') || '(defaults)'}${declined.length ? ` (the ${backend} engine declines ${declined.join(', ')})` : ''}`, async () => {
      const out = freshOut();
      const r = await fa(['run', '--backend', backend, ...c.args, '--out', out]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^fa run: ${backend} \\(.+\\) q \\[.*\\] .*forward .* ms`));
      expect(r.stdout.trim().split('\n')).toHaveLength(1);
      expect(readdirSync(out).sort()).toEqual(c.outputs.map((o) => `${o}.npy`).sort());
      for (const o of c.outputs) {
        const got = readNpy(join(out, `${o}.npy`));
        const want = readNpy(join(FIX, 'expected', c.name, `${o}.npy`));
        expect(got.dtype, o).toBe('float32');
        expect(got.shape, o).toEqual(want.shape);
        const tol = o === 'lse' ? 1e-5 : TOL[c.dtype];
        const e = relErr(got.data as Float32Array, want.data as Float32Array);
        expect(e, `${c.name}/${o}: relative error ${e}`).toBeLessThanOrEqual(tol);
      }
    });
  }

  it('--backend auto works, --dtype f32 is the default, and DIR is created with its parents', async () => {
    const out = join(freshOut(), 'nested', 'dir');
    const r = await fa(['run', '--backend', 'auto', '--dtype', 'f32', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', out]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const e = relErr(readNpy(join(out, 'out.npy')).data as Float32Array, readNpy(join(FIX, 'expected/basic/out.npy')).data as Float32Array);
    expect(e).toBeLessThanOrEqual(1e-5);
  });

  it('accepts --flag=value and negative values after a space', async () => {
    const out = freshOut();
    const r = await fa(['run', '--q=q.npy', '--k', 'k.npy', '--v', 'v.npy', '--dout', 'dout.npy', '--scale', '-0.3', `--out=${out}`]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const e = relErr(readNpy(join(out, 'dq.npy')).data as Float32Array, readNpy(join(FIX, 'expected/negative_scale/dq.npy')).data as Float32Array);
    expect(e).toBeLessThanOrEqual(1e-5);
  });

  it('a KV-cache run leaves the input files alone and writes the appended rows into k_cache.npy', async () => {
    const before = readFileSync(join(FIX, 'kc_paged.npy'));
    const out = freshOut();
    const r = await fa(['run', '--q', 'q1.npy', '--k-cache', 'kc_paged.npy', '--v-cache', 'vc_paged.npy', '--block-table', 'bt.npy', '--cache-seqlens', 'lens_decode.npy', '--k-new', 'kn1.npy', '--v-new', 'vn1.npy', '--out', out]);
    expect(r.code).toBe(0);
    expect(readFileSync(join(FIX, 'kc_paged.npy')).equals(before)).toBe(true);
    // sequence 0 appended at position 6: block bt[0][1] = 1, row 2
    const kc = readNpy(join(out, 'k_cache.npy')).data as Float32Array;
    const kn = readNpy(join(FIX, 'kn1.npy')).data as Float32Array;
    const w = 2 * 16;
    expect([...kc.subarray((1 * 4 + 2) * w, (1 * 4 + 2) * w + w)]).toEqual([...kn.subarray(0, w)]);
  });

  it('bf16 is really computed in bf16: the result differs from f32 by bf16-sized amounts', async () => {
    const o32 = readNpy(join(FIX, 'expected/basic/out.npy')).data as Float32Array;
    const out = freshOut();
    const r = await fa(['run', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--dtype', 'bf16', '--out', out]);
    expect(r.code).toBe(0);
    const ob = readNpy(join(out, 'out.npy')).data as Float32Array;
    const e = relErr(ob, o32);
    expect(e).toBeGreaterThan(1e-4);
    expect(e).toBeLessThan(3e-2);
    // every value is a bf16 value: the low 16 bits of its float32 pattern are zero
    const bits = new Uint32Array(ob.buffer, ob.byteOffset, ob.length);
    expect(bits.every((b) => (b & 0xffff) === 0)).toBe(true);
  });
});

describe('fa: bad invocations print one line "fa: E_CODE: message" and exit non-zero', () => {
  const run = (...a: string[]) => ['run', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'bad-out'), ...a];
  const contig = ['run', '--q', 'q1.npy', '--k-cache', 'kc_contig.npy', '--v-cache', 'vc_contig.npy', '--cache-seqlens', 'lens_decode.npy', '--out', join(tmp, 'bad-out')];
  const kv = (...a: string[]) => ['run', '--q', 'q1.npy', '--k-cache', 'kc_paged.npy', '--v-cache', 'vc_paged.npy', '--out', join(tmp, 'bad-out'), ...a];
  const table: [string, string[], string][] = [
    ['no command', [], 'E_ARG'],
    ['unknown command', ['frobnicate'], 'E_ARG'],
    ['run without --q', ['run', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_ARG'],
    ['run without --out', ['run', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy'], 'E_ARG'],
    ['unknown flag', run('--frobnicate'), 'E_ARG'],
    ['unknown flag for backends', ['backends', '--all'], 'E_ARG'],
    ['a flag missing its value', ['run', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x'), '--q'], 'E_ARG'],
    ['a flag followed by another flag', ['run', '--q', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_ARG'],
    ['a flag given twice', run('--causal', '--causal'), 'E_ARG'],
    ['a stray positional argument', run('extra'), 'E_ARG'],
    ['a value for a boolean flag', run('--causal=yes'), 'E_ARG'],
    ['softcap not a number', run('--softcap', 'abc'), 'E_ARG'],
    ['softcap 0', run('--softcap', '0'), 'E_ARG'],
    ['softcap negative', run('--softcap', '-2'), 'E_ARG'],
    ['scale NaN', run('--scale', 'nan'), 'E_ARG'],
    ['scale Infinity', run('--scale', 'inf'), 'E_ARG'],
    ['scale with trailing junk', run('--scale', '0.5x'), 'E_ARG'],
    ['window with one number', run('--window', '3'), 'E_ARG'],
    ['window below -1', run('--window', '-2,0'), 'E_ARG'],
    ['window not integers', run('--window', '1.5,0'), 'E_ARG'],
    ['unknown dtype', run('--dtype', 'f64'), 'E_DTYPE'],
    ['unknown backend', run('--backend', 'tpu'), 'E_ARG'],
    ['missing input file', ['run', '--q', 'nope.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_IO'],
    ['a directory as input', ['run', '--q', 'expected', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_IO'],
    ['not a .npy file', ['run', '--q', 'bad/not_npy.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_IO'],
    ['an empty file', ['run', '--q', 'bad/empty.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_IO'],
    ['a truncated .npy', ['run', '--q', 'bad/q_truncated.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_IO'],
    ['a float64 .npy', ['run', '--q', 'bad/q_f64.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_DTYPE'],
    ['a Fortran-order .npy', ['run', '--q', 'bad/q_fortran.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_IO'],
    ['a big-endian .npy', ['run', '--q', 'bad/q_bigendian.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_DTYPE'],
    ['int32 data for q', ['run', '--q', 'cu_q.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')], 'E_DTYPE'],
    ['k of the wrong rank', ['run', '--q', 'q.npy', '--k', 'kp.npy', '--v', 'kp.npy', '--out', join(tmp, 'x')], 'E_SHAPE'],
    ['k and v of different shapes', ['run', '--q', 'q.npy', '--k', 'k.npy', '--v', 'q.npy', '--out', join(tmp, 'x')], 'E_SHAPE'],
    ['dout of the wrong shape', run('--dout', 'k.npy'), 'E_SHAPE'],
    ['only --cu-seqlens-q', ['run', '--q', 'qp.npy', '--k', 'kp.npy', '--v', 'vp.npy', '--cu-seqlens-q', 'cu_q.npy', '--out', join(tmp, 'x')], 'E_ARG'],
    ['cu_seqlens as int64', ['run', '--q', 'qp.npy', '--k', 'kp.npy', '--v', 'vp.npy', '--cu-seqlens-q', 'bad/cu_q_i64.npy', '--cu-seqlens-k', 'cu_k.npy', '--out', join(tmp, 'x')], 'E_DTYPE'],
    ['cu_seqlens as float32', ['run', '--q', 'qp.npy', '--k', 'kp.npy', '--v', 'vp.npy', '--cu-seqlens-q', 'slopes.npy', '--cu-seqlens-k', 'cu_k.npy', '--out', join(tmp, 'x')], 'E_DTYPE'],
    ['cu_seqlens 2-d', ['run', '--q', 'qp.npy', '--k', 'kp.npy', '--v', 'vp.npy', '--cu-seqlens-q', 'bad/cu_q_2d.npy', '--cu-seqlens-k', 'cu_k.npy', '--out', join(tmp, 'x')], 'E_SHAPE'],
    ['cu_seqlens not matching the packed tokens', ['run', '--q', 'qp.npy', '--k', 'kp.npy', '--v', 'vp.npy', '--cu-seqlens-q', 'cu_k.npy', '--cu-seqlens-k', 'cu_k.npy', '--out', join(tmp, 'x')], 'E_SHAPE'],
    ['alibi of the wrong length (3 slopes, H = 4)', run('--alibi', 'bad/slopes3.npy'), 'E_SHAPE'],
    ['alibi as int32', run('--alibi', 'cu_q.npy'), 'E_DTYPE'],
    ['alibi of rank 4', run('--alibi', 'q.npy'), 'E_SHAPE'],
    ['sinks of the wrong length (3 logits, H = 4)', run('--sinks', 'bad/sinks3.npy'), 'E_SHAPE'],
    ['a NaN sink', run('--sinks', 'bad/sinks_nan.npy'), 'E_ARG'],
    ['sinks as int32', run('--sinks', 'cu_q.npy'), 'E_DTYPE'],
    ['sinks of rank 2', run('--sinks', 'slopes_bh.npy'), 'E_SHAPE'],
    ['--dropout without --seed', run('--dropout', '0.1'), 'E_ARG'],
    ['dropout p = 1', run('--dropout', '1', '--seed', '3'), 'E_ARG'],
    ['dropout p negative', run('--dropout', '-0.1', '--seed', '3'), 'E_ARG'],
    ['a fractional seed', run('--dropout', '0.1', '--seed', '2.5'), 'E_ARG'],
    ['--dropout-offset alone', run('--dropout-offset', '3'), 'E_ARG'],
    ['a batch index outside the cache', [...contig, '--cache-batch-idx', 'bad/batch_idx_out.npy'], 'E_ARG'],
    ['leftpad past a length', [...contig, '--cache-leftpad', 'bad/leftpad_past.npy'], 'E_ARG'],
    ['--rotary-cos alone', kv('--cache-seqlens', 'lens_decode.npy', '--rotary-cos', 'rope_cos.npy'), 'E_ARG'],
    ['rotary on a dense call', run('--rotary-cos', 'rope_cos.npy', '--rotary-sin', 'rope_sin.npy'), 'E_ARG'],
    ['dropout in a KV-cache call', kv('--cache-seqlens', 'lens_decode.npy', '--dropout', '0.1', '--seed', '1'), 'E_ARG'],
    ['output directory under a file', ['run', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(FIX, 'cases.json', 'sub')], 'E_IO'],
    // KV cache
    ['KV cache without --cache-seqlens', kv(), 'E_ARG'],
    ['KV cache with --k as well', kv('--cache-seqlens', 'lens_decode.npy', '--k', 'k.npy'), 'E_ARG'],
    ['KV cache with --dout', kv('--cache-seqlens', 'lens_decode.npy', '--dout', 'q1.npy'), 'E_ARG'],
    ['--k-new without --v-new', kv('--cache-seqlens', 'lens_decode.npy', '--k-new', 'kn1.npy'), 'E_ARG'],
    ['lengths as float32', kv('--cache-seqlens', 'bad/lens_f32.npy'), 'E_DTYPE'],
    ['a 1-d block table', kv('--cache-seqlens', 'lens_decode.npy', '--block-table', 'bad/bt_1d.npy'), 'E_SHAPE'],
    ['a block index outside the cache', kv('--cache-seqlens', 'lens_decode.npy', '--block-table', 'bad/bt_out_of_range.npy'), 'E_ARG'],
    ['a length past the contiguous cache', ['run', '--q', 'q1.npy', '--k-cache', 'kc_contig.npy', '--v-cache', 'vc_contig.npy', '--cache-seqlens', 'bad/lens_past_capacity.npy', '--k-new', 'kn1.npy', '--v-new', 'vn1.npy', '--out', join(tmp, 'x')], 'E_ARG'],
    ['--v-from-k with a --v-cache', kv('--cache-seqlens', 'lens_decode.npy', '--block-table', 'bt.npy', '--v-from-k', '8'), 'E_ARG'],
    ['--v-from-k past D', ['run', '--q', 'q1.npy', '--k-cache', 'kc_paged.npy', '--block-table', 'bt.npy', '--cache-seqlens', 'lens_decode.npy', '--v-from-k', '17', '--out', join(tmp, 'x')], 'E_ARG'],
    ['--v-from-k on a dense call', run('--v-from-k', '4'), 'E_ARG'],
    ['new keys of the wrong shape', kv('--cache-seqlens', 'lens_decode.npy', '--block-table', 'bt.npy', '--k-new', 'q1.npy', '--v-new', 'q1.npy'), 'E_SHAPE'],
  ];

  it('has at least 10 cases', () => expect(table.length).toBeGreaterThanOrEqual(10));

  for (const [name, args, code] of table) {
    it(`${name} → ${code}`, async () => {
      const r = await fa(args);
      expect(r.code).not.toBe(0);
      expect(r.code).not.toBeNull();
      expect(r.stdout).toBe('');
      const lines = r.stderr.split('\n').filter((l) => l !== '');
      expect(lines, r.stderr).toHaveLength(1);
      expect(r.stderr.endsWith('\n')).toBe(true);
      expect(lines[0]).toMatch(/^fa: E_[A-Z_]+: \S/);
      expect(lines[0].startsWith(`fa: ${code}: `), lines[0]).toBe(true);
      expect(r.stderr).not.toMatch(/\n\s+at |Error: |node:internal/);
    });
  }

  it('a GPU engine that is not installed is E_DEVICE, naming the reason', async () => {
    const b = await fa(['backends']);
    const line = b.stdout.split('\n').find((l) => l.startsWith('cuda '));
    if (!line || !/not installed/.test(line)) return; // installed here: nothing to check
    const r = await fa(run('--backend', 'cuda'));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^fa: E_DEVICE: backend cuda is unavailable: @fa\/cuda is not installed\n$/);
  });

  it('messages say what to do', async () => {
    expect((await fa(['run', '--q', 'bad/q_f64.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')])).stderr).toMatch(/astype\(np\.float32\)/);
    expect((await fa(['run', '--q', 'bad/q_fortran.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')])).stderr).toMatch(/ascontiguousarray/);
    expect((await fa(run('--frobnicate'))).stderr).toMatch(/unknown option --frobnicate/);
    expect((await fa(['run', '--q', 'nope.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', join(tmp, 'x')])).stderr).toMatch(/cannot read --q nope\.npy: no such file/);
  });

  it('a failed run writes no outputs', () => {
    expect(existsSync(join(tmp, 'x'))).toBe(false);
    expect(existsSync(join(tmp, 'bad-out'))).toBe(false);
  });
});

describe('help, demo and bench', () => {
  it('--help prints usage and exits 0', async () => {
    for (const args of [['--help'], ['help', 'run'], ['run', '--help'], ['backends', '-h'], ['demo', '--help'], ['bench', '--help']]) {
      const r = await fa(args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.stdout).toMatch(/^usage: fa/);
    }
    expect((await fa(['run', '--help'])).stdout).toContain('--cu-seqlens-q CQ.npy');
  });

  it('demo tells the story on a small size (see demo.test.ts for the parts)', async () => {
    const r = await fa(['demo', '--backend', 'cpu', '--seq', '40', '--dim', '16', '--causal', '--rows', '8']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^fa demo: exact attention at 100K tokens/);
    expect(r.stdout).toMatch(/Engine: cpu/);
    expect(r.stdout).toMatch(/Verified exact/);
    expect(r.stdout).toMatch(/Slow-memory \(HBM\) traffic, IO model/);
  });

  it('bench prints a table', async () => {
    const r = await fa(['bench', '--backend', 'cpu', '--seq', '16,32', '--heads', '1', '--dim', '8', '--repeat', '1']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^\s+T\s+fwd/m);
    expect(r.stdout).toMatch(/^\s+32\s/m);
  });

  it('demo and bench reject bad flags in one line', async () => {
    for (const args of [['demo', '--seq', '0'], ['demo', '--dtype', 'int8'], ['bench', '--seq', '16,x'], ['bench', '--nope']]) {
      const r = await fa(args);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^fa: E_[A-Z_]+: [^\n]+\n$/);
    }
  });
});

describe('an engine that declines the problem (a fake cuda without f32, preloaded with --import)', () => {
  const REASON = 'f32 is not computed natively on this GPU; use f16 or bf16';
  const faDeclining = (args: string[]) => fa(args, FIX, ['--import', './declining-cuda.mjs']);

  it('is listed as available', async () => {
    const r = await faDeclining(['backends']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n').find((l) => l.startsWith('cuda '))).toMatch(/fake GPU \(declines f32\)\s+available$/);
  });

  it('run --backend auto passes it over for f32 with one note on stderr, and the result is exact', async () => {
    const out = freshOut();
    const r = await faDeclining(['run', '--backend', 'auto', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--dout', 'dout.npy', '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    // the next engine below cuda here: native, or wasm where it does not run (webgpu has no driver on this machine)
    expect(r.stderr).toBe(`fa: note: cuda declines this problem (${REASON}); running it on ${CPU_ENGINE}\n`);
    expect(r.stdout).toMatch(new RegExp(`^fa run: ${CPU_ENGINE} \\(`));
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    for (const o of ['out', 'lse', 'dq', 'dk', 'dv']) {
      const e = relErr(readNpy(join(out, `${o}.npy`)).data as Float32Array, readNpy(join(FIX, 'expected/basic', `${o}.npy`)).data as Float32Array);
      expect(e, o).toBeLessThanOrEqual(1e-5);
    }
  });

  it('run --backend auto uses it for a problem it accepts, without a note', async () => {
    const r = await faDeclining(['run', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--dtype', 'bf16', '--out', freshOut()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^fa run: cuda \(fake GPU \(declines f32\)\) .* bf16/);
  });

  it('run --backend cuda on a problem it declines: one line, exit 1, no outputs', async () => {
    const out = freshOut();
    const r = await faDeclining(['run', '--backend', 'cuda', '--q', 'q.npy', '--k', 'k.npy', '--v', 'v.npy', '--out', out]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`fa: E_UNSUPPORTED: backend cuda cannot compute this problem: ${REASON} (--backend auto picks an engine that can)\n`);
    expect(existsSync(out)).toBe(false);
  });

  it('a KV-cache run with --backend auto passes it over (it has no KV-cache kernels) with one note; the result is exact', async () => {
    const KV_REASON = 'this fake GPU has no KV-cache kernels';
    const c = cases.find((x) => x.name === 'kv_paged_decode_bf16')!;
    const out = freshOut();
    const r = await faDeclining(['run', ...c.args, '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe(`fa: note: cuda declines this problem (${KV_REASON}); running it on ${CPU_ENGINE}\n`);
    expect(r.stdout).toMatch(new RegExp(`^fa run: ${CPU_ENGINE} \\(.*KV cache`));
    for (const o of c.outputs) {
      const e = relErr(readNpy(join(out, `${o}.npy`)).data as Float32Array, readNpy(join(FIX, `expected/${c.name}`, `${o}.npy`)).data as Float32Array);
      expect(e, o).toBeLessThanOrEqual(TOL.bf16);
    }
    const named = freshOut();
    const n = await faDeclining(['run', '--backend', 'cuda', ...c.args, '--out', named]);
    expect(n.code).toBe(1);
    expect(n.stderr).toBe(`fa: E_UNSUPPORTED: backend cuda cannot compute this KV-cache call: ${KV_REASON} (--backend auto picks an engine that can)\n`);
    expect(existsSync(named)).toBe(false);
  });

  it('demo and bench pass it over too, and name it when asked for it', async () => {
    const d = await faDeclining(['demo', '--dtype', 'f32', '--seq', '40', '--dim', '16', '--rows', '4']);
    expect(d.code, d.stderr).toBe(0);
    expect(d.stdout).toMatch(/^\s+cuda\s+skipped: declines this problem \(f32 is not computed natively/m);
    expect(d.stdout).toMatch(new RegExp(`Engine: ${CPU_ENGINE}`));
    const b = await faDeclining(['bench', '--dtype', 'f32', '--seq', '16', '--heads', '1', '--dim', '8', '--repeat', '1']);
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toMatch(new RegExp(`^fa bench: ${CPU_ENGINE} `, 'm'));
    const n = await faDeclining(['bench', '--backend', 'cuda', '--dtype', 'f32', '--seq', '16', '--dim', '8']);
    expect(n.code).toBe(1);
    expect(n.stderr).toBe(`fa: E_UNSUPPORTED: backend cuda cannot compute this problem: ${REASON} (--backend auto picks an engine that can)\n`);
  });
});
