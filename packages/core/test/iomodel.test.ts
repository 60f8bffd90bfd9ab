import { describe, expect, it } from 'vitest';
import {
  DEFAULT_SRAM_BYTES,
  FAError,
  attentionFlops,
  backwardFlops,
  flashBlocks,
  flashTraffic,
  forwardFlops,
  ioModel,
  minimumTraffic,
  naiveTraffic,
  type FAErrorCode,
} from '../dist/index.js';

function codeOf(fn: () => unknown): FAErrorCode {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(FAError);
    return (e as FAError).code;
  }
  throw new Error('expected an FAError');
}

describe('FLOPs', () => {
  it('forward 4·B·H·Tq·Tk·D, half when causal; backward 2.5×', () => {
    // 4 · 2 · 3 · 100 · 300 · 32 = 23 040 000
    const s = { batch: 2, heads: 3, tq: 100, tk: 300, d: 32 };
    expect(forwardFlops(s)).toBe(23_040_000);
    expect(forwardFlops(s, true)).toBe(11_520_000);
    expect(backwardFlops(s)).toBe(57_600_000);
    expect(backwardFlops(s, true)).toBe(28_800_000);
    expect(attentionFlops(s, 'backward')).toBe(57_600_000);
    // tk defaults to tq: 4 · 1 · 1 · 1024 · 1024 · 64 = 2^28
    expect(forwardFlops({ batch: 1, heads: 1, tq: 1024, d: 64 })).toBe(2 ** 28);
  });
});

describe("IO model, case A ('fa1'): B=H=1, N=1024, d=64, f16, M = 192 KiB", () => {
  // M = 196608 bytes / 2 = 98304 elements; Bc = ceil(98304 / (4·64)) = 384; Br = min(384, 64) = 64
  // Tc = ceil(1024 / 384) = 3; Tr = 1024 / 64 = 16
  const s = { batch: 1, heads: 1, tq: 1024, tk: 1024, d: 64 };
  const o = { dtype: 'f16' as const, sramBytes: 192 * 1024, schedule: 'fa1' as const };
  const Nd = 1024 * 64; // 65 536
  const NN = 1024 * 1024; // 1 048 576

  it('block sizes', () => {
    expect(DEFAULT_SRAM_BYTES).toBe(196_608);
    expect(flashBlocks(s, o)).toEqual({ m: 98_304, bc: 384, br: 64, tc: 3, tr: 16 });
  });

  it('naive forward: reads Nd + 2Nd + 2N², writes Nd + 2N²', () => {
    const t = naiveTraffic(s, 'forward', o);
    // reads 65 536 + 131 072 + 2 097 152 = 2 293 760; writes 65 536 + 2 097 152 = 2 162 688
    expect(t.elementsRead).toBe(Nd + 2 * Nd + 2 * NN);
    expect(t.elementsRead).toBe(2_293_760);
    expect(t.elementsWritten).toBe(2_162_688);
    expect(t.statsRead + t.statsWritten).toBe(0);
    // (2 293 760 + 2 162 688) · 2 bytes = 8 912 896
    expect(t.bytes).toBe(8_912_896);
  });

  it('flash forward: K, V once, Q three times, O written 3× and read back 2×', () => {
    const t = flashTraffic(s, 'forward', o);
    // reads 2·Nd + 3·Nd + 2·Nd = 7 · 65 536 = 458 752; writes 3 · Nd = 196 608
    expect(t.elementsRead).toBe(458_752);
    expect(t.elementsWritten).toBe(196_608);
    // ℓ, m: read back (3−1)·2·1024 = 4096, written 3·2·1024 = 6144
    expect(t.statsRead).toBe(4096);
    expect(t.statsWritten).toBe(6144);
    // bytes read 458 752·2 + 4096·4 = 933 888; written 196 608·2 + 6144·4 = 417 792
    expect(t.bytesRead).toBe(933_888);
    expect(t.bytesWritten).toBe(417_792);
    expect(t.bytes).toBe(1_351_680);
  });

  it('minimum forward: Q, K, V read, O and LSE written', () => {
    // (3 · 65 536 + 65 536) · 2 + 1024 · 4 = 524 288 + 4096 = 528 384
    expect(minimumTraffic(s, 'forward', o).bytes).toBe(528_384);
  });

  it('naive backward: 7N² + 4Nd + 4Nd elements', () => {
    const t = naiveTraffic(s, 'backward', o);
    // reads 5·N² + 3·Nd + 2·Nd = 5 242 880 + 327 680 = 5 570 560; writes 2·N² + Nd + 2·Nd = 2 293 760
    expect(t.elementsRead).toBe(5_570_560);
    expect(t.elementsWritten).toBe(2_293_760);
    expect(t.elementsRead + t.elementsWritten).toBe(7 * NN + 8 * Nd);
    expect(t.bytes).toBe(15_728_640);
  });

  it('flash backward', () => {
    const t = flashTraffic(s, 'backward', o);
    // reads 2·Nd (K, V) + 3·3·Nd (Q, O, dO) + 2·Nd (dQ back) = 13 · 65 536 = 851 968
    // writes 3·Nd (dQ) + 2·Nd (dK, dV) = 327 680; stats read 3·2·1024 = 6144
    expect(t.elementsRead).toBe(851_968);
    expect(t.elementsWritten).toBe(327_680);
    expect(t.statsRead).toBe(6144);
    expect(t.statsWritten).toBe(0);
    // (851 968 + 327 680) · 2 + 6144 · 4 = 2 359 296 + 24 576 = 2 383 872
    expect(t.bytes).toBe(2_383_872);
  });

  it('arithmetic intensity = FLOPs / bytes', () => {
    const m = ioModel(s, o);
    expect(m.elementBytes).toBe(2);
    expect(m.forward.flops).toBe(2 ** 28);
    // 2^28 / 8 912 896 = 2048 / 68 ≈ 30.12 FLOP/B
    expect(m.forward.naive.intensity).toBeCloseTo(2048 / 68, 12);
    // 2^28 / 1 351 680 ≈ 198.59 FLOP/B
    expect(m.forward.flash.intensity).toBeCloseTo(268_435_456 / 1_351_680, 12);
    expect(m.forward.minimum.intensity).toBeCloseTo(268_435_456 / 528_384, 12);
    // backward: 2.5 · 2^28 = 671 088 640 FLOPs
    expect(m.backward.flops).toBe(671_088_640);
    expect(m.backward.naive.intensity).toBeCloseTo(671_088_640 / 15_728_640, 12);
    expect(m.backward.flash.intensity).toBeCloseTo(671_088_640 / 2_383_872, 12);
    expect(m.backward.naive.traffic).toEqual(naiveTraffic(s, 'backward', o));
  });
});

describe("IO model, case B ('fa1'): B=2, H=3, Tq=100, Tk=300, d=32, f32, M = 16 KiB", () => {
  // M = 16384 / 4 = 4096 elements; Bc = ceil(4096 / 128) = 32; Br = min(32, 32) = 32
  // Tc = ceil(300 / 32) = 10; Tr = ceil(100 / 32) = 4; B·H = 6
  const s = { batch: 2, heads: 3, tq: 100, tk: 300, d: 32 };
  const o = { sramBytes: 16 * 1024, schedule: 'fa1' as const };

  it('block sizes', () => {
    expect(flashBlocks(s, o)).toEqual({ m: 4096, bc: 32, br: 32, tc: 10, tr: 4 });
  });

  it('naive forward', () => {
    // per head: reads 3200 + 19 200 + 60 000 = 82 400, writes 3200 + 60 000 = 63 200; × 6
    const t = naiveTraffic(s, 'forward', o);
    expect(t.elementsRead).toBe(494_400);
    expect(t.elementsWritten).toBe(379_200);
    // (494 400 + 379 200) · 4 = 3 494 400
    expect(t.bytes).toBe(3_494_400);
  });

  it('flash forward', () => {
    // per head: reads 19 200 (K, V) + 10·3200 (Q) + 9·3200 (O back) = 80 000, writes 10·3200 = 32 000
    // stats read 9·2·100 = 1800, written 10·2·100 = 2000; × 6
    const t = flashTraffic(s, 'forward', o);
    expect(t.elementsRead).toBe(480_000);
    expect(t.elementsWritten).toBe(192_000);
    expect(t.statsRead).toBe(10_800);
    expect(t.statsWritten).toBe(12_000);
    // (480 000 + 192 000) · 4 + (10 800 + 12 000) · 4 = 2 688 000 + 91 200 = 2 779 200
    expect(t.bytes).toBe(2_779_200);
  });

  it('naive and flash backward', () => {
    // naive per head: reads 150 000 + 9600 + 19 200 = 178 800, writes 60 000 + 3200 + 19 200 = 82 400
    // (178 800 + 82 400) · 6 · 4 = 6 268 800
    expect(naiveTraffic(s, 'backward', o).bytes).toBe(6_268_800);
    // flash per head: reads 19 200 + 10·3·3200 + 9·3200 = 144 000, writes 32 000 + 19 200 = 51 200,
    // stats read 10·2·100 = 2000; (144 000 + 51 200) · 6 · 4 + 2000 · 6 · 4 = 4 684 800 + 48 000
    const t = flashTraffic(s, 'backward', o);
    expect(t.elementsRead).toBe(864_000);
    expect(t.elementsWritten).toBe(307_200);
    expect(t.statsRead).toBe(12_000);
    expect(t.bytes).toBe(4_732_800);
  });

  it('minimum backward: read Q, K, V, O, dO, LSE; write dQ, dK, dV', () => {
    // per head: reads 3·3200 + 2·9600 = 28 800, writes 3200 + 19 200 = 22 400, LSE 100
    // (28 800 + 22 400) · 6 · 4 + 100 · 6 · 4 = 1 228 800 + 2400 = 1 231 200
    expect(minimumTraffic(s, 'backward', o).bytes).toBe(1_231_200);
  });
});

describe("IO model ('fa1'): shape of the curves", () => {
  const fa1 = { schedule: 'fa1' as const };
  it('with a single key block (Tc = 1) the flash forward is the minimum plus one statistic per row', () => {
    // N = 128, d = 64, f32, default M: 49 152 elements, Bc = 192 >= 128, Tc = 1
    const s = { batch: 1, heads: 1, tq: 128, d: 64 };
    expect(flashBlocks(s, fa1).tc).toBe(1);
    const f = flashTraffic(s, 'forward', fa1);
    const m = minimumTraffic(s, 'forward');
    expect(f.elementsRead).toBe(m.elementsRead); // 3 · 8192 = 24 576
    expect(f.elementsRead).toBe(24_576);
    expect(f.elementsWritten).toBe(m.elementsWritten);
    expect(f.statsWritten).toBe(256); // ℓ and m against one LSE
    expect(m.statsWritten).toBe(128);
  });

  it('naive traffic grows as N², flash as N²d²/M: quadrupling M shrinks the quadratic term 4×', () => {
    const s = { batch: 1, heads: 1, tq: 65_536, d: 128 };
    const small = flashTraffic(s, 'forward', { dtype: 'f16', sramBytes: 64 * 1024, ...fa1 });
    const large = flashTraffic(s, 'forward', { dtype: 'f16', sramBytes: 256 * 1024, ...fa1 });
    // M = 32 768 → Bc = 64, Tc = 1024; M = 131 072 → Bc = 256, Tc = 256
    expect(flashBlocks(s, { dtype: 'f16', sramBytes: 64 * 1024, ...fa1 }).tc).toBe(1024);
    expect(flashBlocks(s, { dtype: 'f16', sramBytes: 256 * 1024, ...fa1 }).tc).toBe(256);
    const floor = minimumTraffic(s, 'forward', { dtype: 'f16' }).bytes;
    expect((small.bytes - floor) / (large.bytes - floor)).toBeCloseTo(4, 1);
    const n1 = naiveTraffic({ ...s, tq: 8192 }, 'forward').bytes;
    const n2 = naiveTraffic({ ...s, tq: 16_384 }, 'forward').bytes;
    expect(n2 / n1).toBeGreaterThan(3.9);
    // With d = 64 and M = 192 KiB of f16 (98 304 elements), Bc = 384 and Tc = ceil(65 536 / 384) = 171:
    // flash forward ≈ (2 + 171 + 170 + 171)·N·d elements against naive ≈ 4·N², i.e. ≈ M / (3d²) = 8× fewer
    // bytes (7.6× with the statistics); backward ≈ 7·N² against ≈ 858·N·d (8.2×).
    const m = ioModel({ ...s, d: 64 }, { dtype: 'f16', ...fa1 });
    expect(m.forward.flash.intensity / m.forward.naive.intensity).toBeGreaterThan(7.5);
    expect(m.forward.flash.intensity / m.forward.naive.intensity).toBeLessThan(8);
    expect(m.backward.flash.intensity / m.backward.naive.intensity).toBeGreaterThan(8);
    expect(m.backward.flash.intensity / m.backward.naive.intensity).toBeLessThan(8.5);
    // with d = 128 the advantage is M / (3d²) = 2×: the d² in Θ(N²d²/M)
    const m128 = ioModel(s, { dtype: 'f16', ...fa1 });
    expect(m128.forward.naive.traffic.bytes / m128.forward.flash.traffic.bytes).toBeGreaterThan(1.8);
    expect(m128.forward.naive.traffic.bytes / m128.forward.flash.traffic.bytes).toBeLessThan(2.1);
  });

  it('elementBytes overrides dtype', () => {
    const s = { batch: 1, heads: 1, tq: 16, d: 8 };
    const a = naiveTraffic(s, 'forward', { dtype: 'f32' });
    const b = naiveTraffic(s, 'forward', { dtype: 'f32', elementBytes: 1 });
    expect(a.bytes).toBe(4 * b.bytes);
  });
});

describe("IO model, case C ('fa2', the default): B=H=1, N=1024, d=64, f16, M = 192 KiB", () => {
  // M = 196 608 / 2 = 98 304 elements; B = floor(98 304 / (3·64)) = 512 = Br = Bc; Tr = Tc = 1024 / 512 = 2
  const s = { batch: 1, heads: 1, tq: 1024, tk: 1024, d: 64 };
  const o = { dtype: 'f16' as const, sramBytes: 192 * 1024 };
  const Nd = 1024 * 64; // 65 536

  it('block sizes; fa2 is the default', () => {
    expect(flashBlocks(s, o)).toEqual({ m: 98_304, bc: 512, br: 512, tc: 2, tr: 2 });
    expect(flashBlocks(s, { ...o, schedule: 'fa2' })).toEqual(flashBlocks(s, o));
    expect(ioModel(s, o).schedule).toBe('fa2');
    expect(ioModel(s, { ...o, schedule: 'fa1' }).schedule).toBe('fa1');
  });

  it('forward: Q once, K and V once per query tile, O and LSE once', () => {
    const t = flashTraffic(s, 'forward', o);
    // reads Nd (Q) + 2 · 2·Nd (K, V per query tile) = 5 · 65 536 = 327 680; writes Nd (O) = 65 536
    expect(t.elementsRead).toBe(327_680);
    expect(t.elementsWritten).toBe(65_536);
    // LSE written once: 1024; nothing read back
    expect(t.statsRead).toBe(0);
    expect(t.statsWritten).toBe(1024);
    expect(t.accumRead + t.accumWritten).toBe(0);
    // (327 680 + 65 536) · 2 + 1024 · 4 = 786 432 + 4096 = 790 528
    expect(t.bytes).toBe(790_528);
    // = the minimum 528 384 plus the second read of K and V: 2·Nd · 2 bytes = 262 144
    expect(t.bytes - minimumTraffic(s, 'forward', o).bytes).toBe(262_144);
  });

  it('backward: K, V once; Q, dO, LSE, δ per K/V tile; dQ accumulated in float32', () => {
    const t = flashTraffic(s, 'backward', o);
    // reads 2·Nd (K, V) + 2·Nd (pre-pass O, dO) + 2 · 2·Nd (Q, dO per K/V tile) = 8 · 65 536 = 524 288
    // writes 2·Nd (dK, dV) = 131 072
    expect(t.elementsRead).toBe(524_288);
    expect(t.elementsWritten).toBe(131_072);
    // stats: LSE and δ read per K/V tile 2 · 2 · 1024 = 4096; δ written once 1024
    expect(t.statsRead).toBe(4096);
    expect(t.statsWritten).toBe(1024);
    // dQ (float32): written 2 · Nd = 131 072, read back (2 − 1) · Nd = 65 536
    expect(t.accumWritten).toBe(131_072);
    expect(t.accumRead).toBe(65_536);
    // read 524 288 · 2 + (4096 + 65 536) · 4 = 1 048 576 + 278 528 = 1 327 104
    // written 131 072 · 2 + (1024 + 131 072) · 4 = 262 144 + 528 384 = 790 528
    expect(t.bytesRead).toBe(1_327_104);
    expect(t.bytesWritten).toBe(790_528);
    expect(t.bytes).toBe(2_117_632);
  });

  it('intensity', () => {
    const m = ioModel(s, o);
    // 2^28 / 790 528 ≈ 339.6 FLOP/B; backward 671 088 640 / 2 117 632 ≈ 316.9
    expect(m.forward.flash.intensity).toBeCloseTo(268_435_456 / 790_528, 12);
    expect(m.backward.flash.intensity).toBeCloseTo(671_088_640 / 2_117_632, 12);
  });
});

describe("IO model, case D ('fa2'): B=2, H=3, Tq=100, Tk=300, d=32, f32, M = 16 KiB", () => {
  // M = 16 384 / 4 = 4096 elements; B = floor(4096 / 96) = 42; Tr = ceil(100 / 42) = 3; Tc = ceil(300 / 42) = 8
  // per head: Nq·d = 3200, Nk·d = 9600; B·H = 6
  const s = { batch: 2, heads: 3, tq: 100, tk: 300, d: 32 };
  const o = { sramBytes: 16 * 1024, schedule: 'fa2' as const };

  it('block sizes', () => {
    expect(flashBlocks(s, o)).toEqual({ m: 4096, bc: 42, br: 42, tc: 8, tr: 3 });
  });

  it('forward', () => {
    // per head: reads 3200 + 3 · 2 · 9600 = 60 800, writes 3200, LSE 100; × 6
    const t = flashTraffic(s, 'forward', o);
    expect(t.elementsRead).toBe(364_800);
    expect(t.elementsWritten).toBe(19_200);
    expect(t.statsWritten).toBe(600);
    // (364 800 + 19 200) · 4 + 600 · 4 = 1 536 000 + 2400 = 1 538 400
    expect(t.bytes).toBe(1_538_400);
  });

  it('backward', () => {
    // per head: reads 2·9600 + 2·3200 + 8 · 2 · 3200 = 19 200 + 6400 + 51 200 = 76 800, writes 2·9600 = 19 200
    // stats read 8 · 2 · 100 = 1600, written 100; dQ read 7 · 3200 = 22 400, written 8 · 3200 = 25 600; × 6
    const t = flashTraffic(s, 'backward', o);
    expect(t.elementsRead).toBe(460_800);
    expect(t.elementsWritten).toBe(115_200);
    expect(t.statsRead).toBe(9600);
    expect(t.statsWritten).toBe(600);
    expect(t.accumRead).toBe(134_400);
    expect(t.accumWritten).toBe(153_600);
    // everything is 4 bytes in f32: (460 800 + 115 200 + 9600 + 600 + 134 400 + 153 600) · 4 = 874 200 · 4
    expect(t.bytes).toBe(3_496_800);
  });
});

describe("IO model ('fa2'): shape", () => {
  it('with a single query tile (Tr = 1) the forward is exactly the minimum', () => {
    // N = 128, d = 64, f32, default M: 49 152 elements, B = floor(49 152 / 192) = 256 >= 128
    const s = { batch: 1, heads: 1, tq: 128, d: 64 };
    expect(flashBlocks(s).tr).toBe(1);
    expect(flashTraffic(s, 'forward')).toEqual(minimumTraffic(s, 'forward'));
  });

  it('100K tokens, D = 128, f32, 192 KiB: half the naive forward traffic (FA1 order: about the same)', () => {
    // M = 49 152 elements, B = floor(49 152 / 384) = 128, Tr = ceil(100 000 / 128) = 782
    // elements: 12.8e6 (Q) + 782 · 25.6e6 (K, V) + 12.8e6 (O) = 20 044 800 000; · 4 B + 100 000 · 4 (LSE)
    const s = { batch: 1, heads: 1, tq: 100_000, d: 128 };
    expect(flashTraffic(s, 'forward').bytes).toBe(80_179_600_000);
    // naive: (4 · 12.8e6 + 4 · 10^10) · 4 = 160 204 800 000
    expect(naiveTraffic(s, 'forward').bytes).toBe(160_204_800_000);
    const fa1 = flashTraffic(s, 'forward', { schedule: 'fa1' }).bytes;
    expect(fa1 / naiveTraffic(s, 'forward').bytes).toBeGreaterThan(1);
  });
});

describe('IO model: bad arguments', () => {
  const cases: [string, () => unknown][] = [
    ['batch 0', () => forwardFlops({ batch: 0, heads: 1, tq: 1, d: 1 })],
    ['fractional d', () => naiveTraffic({ batch: 1, heads: 1, tq: 1, d: 1.5 }, 'forward')],
    ['NaN tk', () => flashTraffic({ batch: 1, heads: 1, tq: 1, tk: NaN, d: 1 }, 'forward')],
    ['negative sram', () => flashBlocks({ batch: 1, heads: 1, tq: 1, d: 1 }, { sramBytes: -1 })],
    ['sram smaller than one element', () => flashBlocks({ batch: 1, heads: 1, tq: 1, d: 1 }, { sramBytes: 2 })],
    ['zero element size', () => ioModel({ batch: 1, heads: 1, tq: 1, d: 1 }, { elementBytes: 0 })],
    ['unknown schedule', () => flashTraffic({ batch: 1, heads: 1, tq: 1, d: 1 }, 'forward', { schedule: 'fa3' as 'fa2' })],
    ['not an object', () => ioModel(null as unknown as { batch: number; heads: number; tq: number; d: number })],
  ];
  for (const [name, fn] of cases) it(`${name} → E_ARG`, () => expect(codeOf(fn)).toBe('E_ARG'));
});
