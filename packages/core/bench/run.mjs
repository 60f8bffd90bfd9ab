// The @fa/core CPU benchmark: `pnpm --filter @fa/core bench` (after a build).
//
// For T ∈ {1K, 2K, 4K, 8K}, D ∈ {64, 128}, causal and not, B = 1, H = 1, float32: forward and
// forward+backward throughput of the tiled CPU engine (backend "cpu", every core) and of naive
// attention in @tensorflow/tfjs-core + tfjs-backend-cpu 4.22 (matMul, softmax, matMul; the
// gradient through tf.grads) on the same inputs, in the same run, each measurement in a fresh
// process (bench/case.mjs) so that its peak memory is its own. Then T = 16K and 32K (causal)
// for the engine alone: the naive schedule's T×T matrices do not fit there.
//
// FLOPs per DESIGN.md: forward 4·B·H·Tq·Tk·D (half when causal: the useful work; tfjs computes
// the masked half too), backward 2.5× forward, so forward+backward is 3.5× forward.
//
// tfjs is skipped, and the table says why, where its estimated peak memory (extrapolated ∝ T²
// from the previous size) exceeds FA_BENCH_TFJS_MEM (default 4 GiB), or its estimated time
// exceeds FA_BENCH_TFJS_SECONDS (default 300 s for its forward and forward+backward measurements together).
//
// Environment: FA_BENCH_QUICK=1 (T ∈ {1K, 2K}, no big sizes), FA_BENCH_NO_WRITE=1 (do not
// rewrite BENCHMARKS.md), FA_BENCH_BIG=0 (skip the 16K/32K rows), FA_BENCH_T=1024,2048 and
// FA_BENCH_D=64 (other size lists), FA_BENCH_CAUSAL=0|1 (only one of the two), FA_BENCH_MERGE=1 (replace only the re-measured rows of the
// existing BENCHMARKS.md table, e.g. rows a busy machine disturbed, and note the re-measurement).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const env = process.env;
const quick = env.FA_BENCH_QUICK === '1';
const tfjsMem = Number(env.FA_BENCH_TFJS_MEM ?? 4 * 2 ** 30);
const tfjsSeconds = Number(env.FA_BENCH_TFJS_SECONDS ?? 300);
const list = (v, d) => (v ? v.split(',').map(Number) : d);
const Ts = list(env.FA_BENCH_T, quick ? [1024, 2048] : [1024, 2048, 4096, 8192]);
const Ds = list(env.FA_BENCH_D, [64, 128]);
const big = quick || env.FA_BENCH_BIG === '0' ? [] : [16384, 32768];

const sh = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
};
const cpuModel = (sh('lscpu', []).match(/Model name:\s*(.+)/) ?? [])[1] ?? os.cpus()[0]?.model ?? 'unknown';
const cores = os.availableParallelism?.() ?? os.cpus().length;
const commit = sh('git', ['rev-parse', '--short', 'HEAD']) || 'unknown';
const dirty = sh('git', ['status', '--porcelain', '--', '.']) ? ' (with uncommitted changes in packages/core)' : '';
const loadBefore = os.loadavg();
const started = new Date();

function runCase(c) {
  const r = spawnSync(process.execPath, [here('./case.mjs'), JSON.stringify(c)], { encoding: 'utf8', maxBuffer: 1 << 24, env: { ...env } });
  const line = r.stdout.trim().split('\n').filter((l) => l.startsWith('{')).pop();
  if (r.status !== 0 || !line) {
    const why = (r.stderr || r.stdout).trim().split('\n').filter(Boolean).slice(-3).join(' | ');
    return { error: why || `exit ${r.status} ${r.signal ?? ''}`.trim() };
  }
  return JSON.parse(line);
}

const fwdFlops = (T, D, causal) => (4 * T * T * D) / (causal ? 2 : 1);
const gf = (flops, s) => flops / s / 1e9;
const mb = (b) => (Number.isFinite(b) ? `${(b / 2 ** 20).toFixed(0)} MB` : '?');
const rows = [];
const tfPrev = new Map(); // D/causal -> last tfjs result, for the extrapolations

function log(s) {
  process.stdout.write(`${s}\n`);
}

log(`@fa/core CPU benchmark — ${cpuModel}, ${cores} cores, Node ${process.version}, load ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
for (const D of Ds) {
  for (const causal of env.FA_BENCH_CAUSAL === '1' ? [true] : env.FA_BENCH_CAUSAL === '0' ? [false] : [false, true]) {
    for (const T of [...Ts, ...(D === 64 && causal ? big : [])]) {
      const isBig = T > Ts[Ts.length - 1];
      const both = (engine, reps, repsB) => {
        const a = runCase({ engine, T, D, causal, reps, phase: 'fwd' });
        if (a.error) return a;
        const b = runCase({ engine, T, D, causal, reps: repsB, phase: 'fwdbwd' });
        return b.error ? b : { ...a, fwdbwd: b.fwdbwd };
      };
      // best of several repetitions: the engine's runs are short, and on a shared machine the
      // best one is the one least disturbed by other work
      const fa = isBig ? both('fa', 1, 1) : T <= 2048 ? both('fa', 5, 3) : both('fa', 3, 2);
      let tf;
      const prev = tfPrev.get(`${D}/${causal}`);
      if (isBig) tf = { skipped: `naive needs the ${T}×${T} score matrix: ${((T * T * 4) / 2 ** 30).toFixed(0)} GiB in float32 per copy` };
      else if (prev) {
        const f = (T / prev.T) ** 2;
        const estMem = Math.max(prev.fwd.peakExtra, prev.fwdbwd.peakExtra) * f;
        const estS = (prev.fwd.seconds + prev.fwdbwd.seconds) * f;
        if (estMem > tfjsMem) tf = { skipped: `est. peak ${mb(estMem)} > cap ${mb(tfjsMem)}` };
        else if (estS > tfjsSeconds) tf = { skipped: `est. ${estS.toFixed(0)} s > cap ${tfjsSeconds} s` };
      }
      if (!tf) {
        tf = both('tfjs', T <= 1024 ? 2 : 1, 1);
        if (!tf.error) tfPrev.set(`${D}/${causal}`, tf);
      }
      const F = fwdFlops(T, D, causal);
      const row = {
        T, D, causal, load: os.loadavg()[0],
        fa: fa.error ? { error: fa.error } : { fwd: gf(F, fa.fwd.seconds), fwdS: fa.fwd.seconds, fb: gf(3.5 * F, fa.fwdbwd.seconds), fbS: fa.fwdbwd.seconds, memF: fa.fwd.peakExtra, memFB: fa.fwdbwd.peakExtra, device: fa.device },
        tf: tf.skipped || tf.error ? tf : { fwd: gf(F, tf.fwd.seconds), fwdS: tf.fwd.seconds, fb: gf(3.5 * F, tf.fwdbwd.seconds), fbS: tf.fwdbwd.seconds, memF: tf.fwd.peakExtra, memFB: tf.fwdbwd.peakExtra },
      };
      rows.push(row);
      log(formatRow(row));
    }
  }
}

function formatRow(r) {
  const f = r.fa;
  const t = r.tf;
  const cell = (x) => (x === undefined ? '—' : x.toFixed(2));
  const ratio = (a, b) => (a !== undefined && b !== undefined ? `${(a / b).toFixed(1)}×` : '—');
  const fa = f.error ? [`error: ${f.error}`, '', '', ''] : [cell(f.fwd), cell(f.fb), mb(f.memF), mb(f.memFB)];
  const tf = t.skipped ? [`skipped: ${t.skipped}`, '', '', ''] : t.error ? [`failed: ${t.error.slice(0, 80)}`, '', '', ''] : [cell(t.fwd), cell(t.fb), mb(t.memF), mb(t.memFB)];
  return `| ${r.T} | ${r.D} | ${r.causal ? 'yes' : 'no'} | ${fa.join(' | ')} | ${tf.join(' | ')} | ${ratio(f.fwd, t.fwd)} | ${ratio(f.fb, t.fb)} | ${r.load.toFixed(1)} |`;
}

const header = [
  '| T | D | causal | @fa cpu fwd GFLOP/s | @fa cpu fwd+bwd GFLOP/s | @fa peak mem fwd | @fa peak mem fwd+bwd | tfjs fwd GFLOP/s | tfjs fwd+bwd GFLOP/s | tfjs peak mem fwd | tfjs peak mem fwd+bwd | fwd ratio | fwd+bwd ratio | load |',
  '|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
];
const loadAfter = os.loadavg();
const table = [...header, ...rows.map(formatRow)].join('\n');
log('');
log(table);
log(`load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}`);

if (env.FA_BENCH_NO_WRITE !== '1') {
  const file = here('../BENCHMARKS.md');
  const device = rows.find((r) => r.fa.device)?.fa.device ?? '?';
  const loadStr = (l) => l.map((x) => x.toFixed(2)).join(', ');
  // FA_BENCH_MERGE=1: re-measured rows replace theirs in the existing table (for rows a busy
  // machine disturbed); the other rows and the original run's date/commit/load stay, and a line
  // records the re-measurement.
  let lines = rows.map(formatRow);
  let meta = [
    `- Date: ${started.toISOString()}`,
    `- Commit: ${commit}${dirty}`,
    `- Load average (1, 5, 15 min) when the run started: ${loadStr(loadBefore)}; when it ended: ${loadStr(loadAfter)}.`,
  ];
  if (env.FA_BENCH_MERGE === '1' && existsSync(file)) {
    const old = readFileSync(file, 'utf8').split('\n');
    const key = (line) => line.split('|').slice(1, 4).map((x) => x.trim()).join('/');
    const table = new Map(old.filter((l) => /^\| \d/.test(l)).map((l) => [key(l), l]));
    for (const l of lines) table.set(key(l), l);
    const order = (k) => {
      const [T, D, c] = k.split('/');
      return Number(D) * 1e9 + (c === 'yes' ? 1e8 : 0) + Number(T);
    };
    lines = [...table.keys()].sort((a, b) => order(a) - order(b)).map((k) => table.get(k));
    meta = [
      ...old.filter((l) => /^- (Date|Commit|Load average|Re-measured)/.test(l)),
      `- Re-measured ${started.toISOString()} (commit ${commit}${dirty ? ', uncommitted changes' : ''}), load ${loadStr(loadBefore)} → ${loadStr(loadAfter)}: ${rows.map((r) => `T=${r.T} D=${r.D}${r.causal ? ' causal' : ''}`).join('; ')}.`,
    ];
  }
  const parse = (line) => line.split('|').slice(1, -1).map((x) => x.trim());
  const r2k = lines.map(parse).find((c) => c[0] === '2048' && c[1] === '64' && c[2] === 'no');
  const headline = r2k && Number(r2k[3]) && Number(r2k[7]) ? `At T = 2048, D = 64 (not causal) the engine's forward runs at ${r2k[3]} GFLOP/s against tfjs-cpu's ${r2k[7]}: ${r2k[11]}.` : '';
  const text = `# @fa/core — CPU benchmark

Generated by \`pnpm --filter @fa/core bench\` (packages/core/bench/run.mjs); rerun it to refresh this file.

${meta.join('\n')}
- Machine: ${cpuModel}, ${cores} cores (\`lscpu\`), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB RAM, Node ${process.version}
- Engine: backend "cpu" (${device}: worker threads over SharedArrayBuffer), default tiles from the cache model
- Peer: naive attention in @tensorflow/tfjs-core + @tensorflow/tfjs-backend-cpu 4.22 (single-threaded JavaScript): \`matMul(softmax(q·kᵀ·scale [+ causal bias]), v)\`, backward through \`tf.grads\`

The machine is shared with other work; the "load" column (1-minute load average when the row
finished) says how busy it was. The measurement itself accounts for ~1 (tfjs) or ~2 (the
engine's two worker threads); a row with load well above 2 ran alongside other processes and
its engine numbers are low (the engine needs both cores, tfjs only one).

Problem: B = 1, H = 1, float32 inputs, T = Tq = Tk. FLOPs per DESIGN.md: forward 4·T²·D, half when
causal (the useful work; the naive schedule computes the masked half as well), backward 2.5×
forward, so "fwd+bwd" is 3.5× forward divided by the time of forward then backward.
Each cell is the best of several repetitions (the engine: 5 forward / 3 forward+backward runs
for T ≤ 2K, 3 / 2 up to 8K, 1 beyond; tfjs: 2 forward runs at 1K, else 1), each measurement in a
fresh process.
Peak memory is the process's peak resident memory (VmHWM) above its baseline, where the
baseline already holds the inputs and a warmed-up engine; it includes the results (a few MB here).
Naive attention holds T×T matrices (4·T² bytes each); the tiled engine holds tiles, O(T) row
statistics and, in the backward with fewer (batch, kv-head) groups than threads, a private dQ.

${headline}

${[...header, ...lines].join('\n')}

tfjs is skipped where its estimated peak memory (extrapolated ∝ T² from the previous size) is
above ${mb(tfjsMem)}, or its estimated time (forward and forward+backward together) above ${tfjsSeconds} s (set FA_BENCH_TFJS_MEM /
FA_BENCH_TFJS_SECONDS to change the caps). At T = 16K and 32K the naive schedule needs 1 and 4 GiB
per T×T float32 matrix and several of them at once; the tiled engine runs those sizes in the
memory shown.

See KERNEL_NOTES.md for the kernel variants behind these numbers.
`;
  writeFileSync(file, text);
  log(`wrote ${file}`);
}

