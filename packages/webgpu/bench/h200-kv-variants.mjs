// `h200-kv.mjs --variants` (issue 12): the decode kernel's variants side by side on one adapter,
// each alternated with the copy kernel, then the KV kit on every variant. The helpers (device,
// timestamp profiler, inputs, copy) are h200-kv.mjs's; see its header for how to run it.
import { formatSummary, runConformance } from '@fa/core/testing';

/**
 * The variants, as backend options ('base' is the package's default). KERNEL_NOTES.md has each
 * one's prediction. c8*: 16-bit caches only (f32 rows are already 16-byte chunks over 32 lanes at
 * D = 128, so those would time the base kernel again).
 */
export const VARIANTS = {
  base: {},
  lazy: { kvLazyRescale: true },
  qw: { kvQShared: true },
  'qw+lazy': { kvQShared: true, kvLazyRescale: true },
  kb8: { kvKeysPerStep: 8 },
  'kb8+lazy': { kvKeysPerStep: 8, kvLazyRescale: true },
  'qw+kb8+lazy': { kvQShared: true, kvKeysPerStep: 8, kvLazyRescale: true },
  c8: { kvChunkBytes: 8 },
  'c8+lazy': { kvChunkBytes: 8, kvLazyRescale: true },
  'c8+kb2+lazy': { kvChunkBytes: 8, kvKeysPerStep: 2, kvLazyRescale: true },
  'c8+kb8': { kvChunkBytes: 8, kvKeysPerStep: 8 },
  'c8+kb8+lazy': { kvChunkBytes: 8, kvKeysPerStep: 8, kvLazyRescale: true },
  'c8+qw+lazy': { kvChunkBytes: 8, kvQShared: true, kvLazyRescale: true },
  'c8+qw+kb8+lazy': { kvChunkBytes: 8, kvQShared: true, kvKeysPerStep: 8, kvLazyRescale: true },
  // transpose team sums (fewer shuffles per step)
  tr: { kvTeamSum: 'transpose' },
  'tr+lazy': { kvTeamSum: 'transpose', kvLazyRescale: true },
  'kb8+tr+lazy': { kvKeysPerStep: 8, kvTeamSum: 'transpose', kvLazyRescale: true },
  'qw+kb8+tr+lazy': { kvQShared: true, kvKeysPerStep: 8, kvTeamSum: 'transpose', kvLazyRescale: true },
  'c8+tr+lazy': { kvChunkBytes: 8, kvTeamSum: 'transpose', kvLazyRescale: true },
  'c8+kb8+tr+lazy': { kvChunkBytes: 8, kvKeysPerStep: 8, kvTeamSum: 'transpose', kvLazyRescale: true },
  'c8+qw+kb8+tr+lazy': { kvChunkBytes: 8, kvQShared: true, kvKeysPerStep: 8, kvTeamSum: 'transpose', kvLazyRescale: true },
};
/**
 * Round 4 (--variants4): more loads in flight per lane (KERNEL_NOTES.md, "KV-4", has each one's
 * prediction). pf: the next step's K/V rows loaded before this step computes (double-buffered
 * registers); ra: the block-table lookups a step ahead of their row loads; sp: the softmax of
 * one (key, row) pair per lane; r2: 2 rows per workgroup; wg64/wg256: threads per workgroup.
 * kv3: KV-3's best (qw+kb8+tr+lazy), for reference.
 */
export const VARIANTS4 = {
  base: {},
  kv3: VARIANTS['qw+kb8+tr+lazy'],
  pf: { kvPrefetch: true },
  'pf+kb2': { kvPrefetch: true, kvKeysPerStep: 2 },
  'pf+kb1': { kvPrefetch: true, kvKeysPerStep: 1 },
  ra: { kvRowsAhead: true },
  'pf+ra': { kvPrefetch: true, kvRowsAhead: true },
  'pf+ra+kb2': { kvPrefetch: true, kvRowsAhead: true, kvKeysPerStep: 2 },
  sp: { kvSoftmax: 'spread' },
  'sp+ra': { kvSoftmax: 'spread', kvRowsAhead: true },
  'sp+pf+ra': { kvSoftmax: 'spread', kvPrefetch: true, kvRowsAhead: true },
  'sp+pf+ra+kb2': { kvSoftmax: 'spread', kvPrefetch: true, kvRowsAhead: true, kvKeysPerStep: 2 },
  'sp+kb8': { kvSoftmax: 'spread', kvKeysPerStep: 8 },
  'r2+pf+ra': { kvRows: 2, kvPrefetch: true, kvRowsAhead: true },
  wg64: { kvThreads: 64 },
  wg256: { kvThreads: 256 },
};
/** Round 4's names that are not new (the kit runs on the two fastest of the others). */
const REFERENCE = new Set(['base', 'kv3']);
const TARGETS = [256, 512, 1024, 2048, 4096];
const TARGETS4 = [512, 2048];

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

export async function runVariants(h) {
  const TABLE = h.round4 ? VARIANTS4 : VARIANTS;
  // FA_VARIANTS=base,lazy,… : only those (base always)
  const CHOSEN = process.env.FA_VARIANTS ? ['base', ...process.env.FA_VARIANTS.split(',')] : Object.keys(TABLE);
  for (const n of CHOSEN) if (!(n in TABLE)) throw new Error(`FA_VARIANTS: no variant ${n}; known: ${Object.keys(TABLE).join(', ')}`);
  const { dev, pdev, variant, profile, copyPass, copySeconds, decodeInputs, timeCalls, fmtGpu, log, save, results, SMALL, elapsed } = h;
  const budget = Number(process.env.FA_BENCH_BUDGET_S ?? (h.round4 ? 115 : 160));
  const rounds = SMALL ? 2 : 3;
  const reps = SMALL ? 2 : 20;
  Object.assign(results, { variants: [], targets: [], variantKit: {} });
  const base = { H: 32, Hkv: 8, D: 128, bs: 256 };
  const shapes = SMALL
    ? h.round4
      ? // teams of 8 lanes (f32 D32, f16 D64): subgroup sums and the spread softmax on an 8-lane driver
        [{ B: 2, T: 1024, H: 4, Hkv: 2, D: 32, bs: 64, dtype: 'f32' }, { B: 2, T: 1024, H: 4, Hkv: 2, D: 64, bs: 64, dtype: 'f16' }]
      : [{ B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 64, dtype: 'f32' }, { B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 64, dtype: 'f16' }]
    : h.round4
    ? [
        { ...base, B: 8, T: 32768, dtype: 'f32' },
        { ...base, B: 8, T: 32768, dtype: 'f16' },
        { ...base, B: 1, T: 131072, dtype: 'f32' },
        { ...base, B: 1, T: 131072, dtype: 'f16' },
      ]
    : [
        { ...base, B: 8, T: 32768, dtype: 'f32' },
        { ...base, B: 8, T: 32768, dtype: 'f16' },
        { ...base, B: 1, T: 32768, dtype: 'f32' },
        { ...base, B: 1, T: 32768, dtype: 'f16' },
        { ...base, B: 1, T: 131072, dtype: 'f32' },
        { ...base, B: 1, T: 131072, dtype: 'f16' },
      ];
  const backends = new Map();
  const backend = async (key, opts) => {
    if (!backends.has(key)) backends.set(key, await variant(opts));
    return backends.get(key);
  };
  // the copy kernel's GPU µs (median of `n` timed passes), through the profiler like the decode
  const copyUs = async (src, bytes, n) => {
    const copy = copyPass(src, bytes);
    const g = await profile(n, async () => {
      const enc = pdev.createCommandEncoder();
      copy.encode(enc, 'copy');
      dev.queue.submit([enc.finish()]);
      await dev.queue.onSubmittedWorkDone();
    });
    copy.destroy();
    return g?.copy;
  };
  const decodeUs = (g) => (g ? (g['kv decode'] ?? g['kv attend']) : undefined);
  const pct = (x) => (x === undefined || !Number.isFinite(x) ? 'n/a' : `${(100 * x).toFixed(1)} %`);
  const fastest = {}; // dtype → variant name (B = 8, Tk = 32K), for the kit order

  for (const s of shapes) {
    if (elapsed() > budget) {
      log(`(budget ${budget} s: skipped ${JSON.stringify(s)})`);
      continue;
    }
    let x;
    try {
      x = await decodeInputs(s);
      const bytes = 2 * s.B * s.T * s.Hkv * s.D * (s.dtype === 'f32' ? 4 : 2); // the K and V rows one step reads
      const names = [...new Set(CHOSEN)].filter((n) => s.dtype !== 'f32' || !n.startsWith('c8'));
      await copySeconds(x.kc.handle.buffer, x.cacheBytes); // clocks up before anything is timed
      const rec = Object.fromEntries(names.map((n) => [n, { decode: [], total: [], wall: [], copy: [] }]));
      // round r: every variant, each right after a copy; odd rounds in reverse order (drift)
      for (let r = 0; r < rounds; r++) {
        for (const n of r % 2 ? [...names].reverse() : names) {
          const e = rec[n];
          if (e.error) continue;
          const c = await copyUs(x.kc.handle.buffer, x.cacheBytes, SMALL ? 2 : 5);
          const b = await backend(n, TABLE[n]);
          let m;
          try {
            m = await timeCalls(b, x, reps);
          } catch (err) {
            e.error = err.message;
            results.errors.push(`${n} on ${JSON.stringify(s)}: ${err.message}`);
            log(`${n} failed: ${err.message}`);
            continue;
          }
          if (c !== undefined) e.copy.push(c);
          if (m.gpu) {
            e.decode.push(decodeUs(m.gpu));
            e.total.push(m.gpu.total);
          }
          e.wall.push(m.us);
          e.plan = b.lastKVPlan;
          e.lastGpu = m.gpu;
        }
      }
      const allCopies = names.flatMap((n) => rec[n].copy);
      const copyMed = allCopies.length ? median(allCopies) : undefined;
      const copyGbs = copyMed ? (2 * x.cacheBytes) / copyMed / 1e3 : undefined; // bytes read + written
      log(`\n${JSON.stringify(s)}: copy ${copyMed?.toFixed(1) ?? 'n/a'} µs GPU (${copyGbs?.toFixed(0) ?? 'n/a'} GB/s r+w; min ${allCopies.length ? Math.min(...allCopies).toFixed(1) : 'n/a'}, max ${allCopies.length ? Math.max(...allCopies).toFixed(1) : 'n/a'})`);
      log('| variant | decode pass µs (best; rounds) | of copy | GPU total µs | of copy | wall µs | plan |');
      log('|:---|:---|---:|---:|---:|---:|:---|');
      const rows = [];
      for (const n of names.filter((n2) => rec[n2].wall.length)) {
        const e = rec[n];
        const dBest = e.decode.length ? Math.min(...e.decode) : undefined;
        const tBest = e.total.length ? Math.min(...e.total) : undefined;
        const wBest = Math.min(...e.wall);
        const ratio = dBest && copyGbs ? bytes / dBest / 1e3 / copyGbs : undefined;
        const ratioTotal = tBest && copyGbs ? bytes / tBest / 1e3 / copyGbs : undefined;
        const d = e.plan?.decode;
        const plan = d ? `L${d.lanes} E${d.elems} KB${d.keys} R${d.rows} T${d.threads ?? 128} splits ${e.plan.splits}${d.subgroups ? '' : ' wg-sums'}${d.spread ? ' spread' : ''}` : (e.plan?.kernel ?? '?');
        rows.push({ shape: s, name: n, opts: TABLE[n], decodeUs: e.decode, totalUs: e.total, wallUs: e.wall, copyUs: e.copy, copyGbs, ratio, ratioTotal, plan: e.plan, gpu: e.lastGpu });
        log(`| ${n} | ${dBest?.toFixed(1) ?? 'n/a'} (${e.decode.map((v) => v.toFixed(0)).join(', ')}) | ${pct(ratio)} | ${tBest?.toFixed(1) ?? 'n/a'} | ${pct(ratioTotal)} | ${wBest.toFixed(0)} | ${plan} |`);
      }
      results.variants.push(...rows);
      // the fastest (decode pass, else wall) → the split target sweep on it
      const key = (r) => (r.decodeUs.length ? Math.min(...r.decodeUs) : Math.min(...r.wallUs));
      const best = rows.reduce((a, b2) => (key(b2) < key(a) ? b2 : a));
      if (s.B === 8 || SMALL) fastest[s.dtype] ??= best.name;
      const b0 = rows.find((r) => r.name === 'base');
      log(`fastest: ${best.name} (${key(best).toFixed(1)} µs; base ${b0 ? key(b0).toFixed(1) : 'n/a'})`);
      if (elapsed() < budget && !h.skip?.has('sweep')) {
        const line = [];
        for (const t of SMALL ? [64, 1024] : h.round4 ? TARGETS4 : TARGETS) {
          const c = await copyUs(x.kc.handle.buffer, x.cacheBytes, SMALL ? 2 : 5);
          const b = await backend(`${best.name}@${t}`, { ...TABLE[best.name], kvTargetWorkgroups: t });
          const m = await timeCalls(b, x, reps);
          const du = decodeUs(m.gpu);
          const ratio = du && c ? bytes / du / 1e3 / ((2 * x.cacheBytes) / c / 1e3) : undefined;
          results.targets.push({ shape: s, name: best.name, target: t, us: m.us, gpu: m.gpu, copyUs: c, ratio, splits: b.lastKVPlan?.splits });
          line.push(`${t}: ${du?.toFixed(1) ?? m.us.toFixed(0) + ' wall'} (${fmtGpu(m.gpu)}; ${pct(ratio)}, ${b.lastKVPlan?.splits} splits)`);
        }
        log(`split target on ${best.name}: ${line.join('; ')}`);
      }
    } catch (e) {
      results.errors.push(`${JSON.stringify(s)}: ${e.message}`);
      log(`variants ${JSON.stringify(s)} failed: ${e.stack ?? e.message}`);
    } finally {
      x?.dispose();
    }
    save();
  }
  for (const b of backends.values()) await b.dispose();

  // the KV kit (every case goes to the decode kernel by the rule) on each variant, fastest first
  // then the others by their best speed-up over base on the B = 8 shapes (the kit compiles every
  // specialisation a variant makes, ~15 s each on the H200: the budget may stop the slowest)
  const gain = (n) => {
    const g = results.variants.filter((r) => r.name === n && (r.shape.B === 8 || SMALL) && r.decodeUs.length).map((r) => {
      const b = results.variants.find((x) => x.name === 'base' && x.shape === r.shape);
      return Math.min(...r.decodeUs) / Math.min(...(b?.decodeUs ?? [Infinity]));
    });
    return g.length ? Math.min(...g) : Infinity;
  };
  const gainMean = (n) => {
    const g = results.variants.filter((r) => r.name === n && (r.shape.B === 8 || SMALL) && r.decodeUs.length).map((r) => {
      const b = results.variants.find((x) => x.name === 'base' && x.shape === r.shape);
      return Math.min(...r.decodeUs) / Math.min(...(b?.decodeUs ?? [Infinity]));
    });
    return g.length ? g.reduce((a, b) => a + b, 0) / g.length : Infinity;
  };
  // round 4: the two fastest new variants (mean over the B = 8 shapes of their time over base's), device caches
  const order = h.round4
    ? CHOSEN.filter((n) => !REFERENCE.has(n)).sort((a, b) => gainMean(a) - gainMean(b)).slice(0, 2)
    : [...new Set([...Object.values(fastest), ...[...CHOSEN].sort((a, b) => gain(a) - gain(b))])];
  if (h.round4) {
    for (const n of CHOSEN) log(`  ${n}: B = 8 decode pass ${(100 * gainMean(n)).toFixed(1)} % of base's time (mean over dtypes)`);
    log(`\nKV kit (device caches) on ${order.join(', ')}`);
  } else log(`\nKV kit per variant (device caches; host caches too on ${[...new Set(Object.values(fastest))].join(', ') || 'none'})`);
  for (const n of h.skip?.has('kit') ? [] : order) {
    for (const upload of !h.round4 && Object.values(fastest).includes(n) ? [true, false] : [true]) {
      if (elapsed() > budget + 50) {
        log(`(budget: kit skipped on ${n}${upload ? '' : ', host caches'})`);
        continue;
      }
      const b = await variant(TABLE[n]);
      try {
        const t0 = performance.now();
        const sum = await runConformance(b, { cases: [], kvCache: true, upload, quick: SMALL });
        const line = `${n}${upload ? '' : ' (host caches)'}: ${formatSummary(sum)} (${((performance.now() - t0) / 1000).toFixed(1)} s; ${b.lastKVPlan?.kernel})`;
        results.variantKit[`${n}${upload ? '' : ' host'}`] = { summary: line, failures: sum.failures };
        log(line);
        for (const f of sum.failures.slice(0, 5)) log('  ' + f.message.split('\n').slice(0, 3).join(' | '));
        if (sum.failures.length) results.errors.push(`kit failed on ${n}`);
      } catch (e) {
        results.errors.push(`kit on ${n}: ${e.message}`);
        log(`kit on ${n} threw: ${e.message}`);
      } finally {
        await b.dispose();
      }
      save();
    }
  }
  // last, short (the device tool returns the output's tail): per shape base and the three fastest
  log('\nsummary: decode pass µs (% of the copy, GPU time), per shape');
  for (const sh of [...new Set(results.variants.map((r) => r.shape))]) {
    const rs = results.variants.filter((r) => r.shape === sh && r.decodeUs.length).sort((a, b) => Math.min(...a.decodeUs) - Math.min(...b.decodeUs));
    const f = (r) => `${r.name} ${Math.min(...r.decodeUs).toFixed(0)} (${pct(r.ratio)})`;
    const b0 = rs.find((r) => r.name === 'base');
    log(`  B${sh.B} Tk${sh.T} ${sh.dtype}: base ${b0 ? f(b0).slice(5) : 'n/a'}; ${rs.slice(0, 3).map(f).join('; ')}`);
  }
  for (const [n, k] of Object.entries(results.variantKit)) log(`  kit ${n}: ${k.summary.replace(/^.*\): /, '')}`);
}
