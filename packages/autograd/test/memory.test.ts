/**
 * What training keeps for backward. A 4-layer attention stack at T = 4096, D = 64 holds less
 * than a tenth of the probabilities P (B·H·T·T floats per layer) that naive attention would
 * keep; with checkpoint() around each block it holds only the block inputs, O(layers × T × D).
 * At a small T the same accounting, applied to attention composed from matmul + softmax, does
 * find P on the tape: the measure sees what it claims to exclude.
 */
import '@fa/core';
import { describe, expect, it } from 'vitest';
import {
  LayerNorm, Linear, Rng, SelfAttention, Tensor, add, attention, checkpoint, formatBytes, formatMemoryReport, matmul, mean, memoryReport,
  permute, randn, scale, softmax,
} from '@fa/autograd';

const BACKEND = 'cpu';

class AttentionLayer {
  readonly ln: LayerNorm;
  readonly attn: SelfAttention;
  constructor(c: number, heads: number, rng: Rng) {
    this.ln = new LayerNorm(c);
    this.attn = new SelfAttention(c, heads, { rng, attention: { causal: true, backend: BACKEND } });
  }
  async forward(x: Tensor): Promise<Tensor> {
    return add(x, await this.attn.forward(this.ln.forward(x)));
  }
}

async function stack(layers: AttentionLayer[], input: Tensor, embed: Linear, ckpt: boolean): Promise<Tensor> {
  let x = embed.forward(input); // an activation, as the output of an embedding would be
  for (const l of layers) x = ckpt ? await checkpoint((h: Tensor) => l.forward(h), x) : await l.forward(x);
  return mean(x);
}

describe('memory held for backward', () => {
  it('4 attention layers at T = 4096, D = 64: < P/10 plain, O(layers·T·D) with checkpoint()', async () => {
    const [B, T, H, D, L] = [1, 4096, 1, 64, 4];
    const C = H * D;
    const rng = new Rng(1);
    const layers = Array.from({ length: L }, () => new AttentionLayer(C, H, rng));
    const embed = new Linear(C, C, { rng });
    const input = randn([B, T, C], { rng });

    const t0 = performance.now();
    const plain = memoryReport(await stack(layers, input, embed, false));
    const t1 = performance.now();
    const ck = memoryReport(await stack(layers, input, embed, true));
    const t2 = performance.now();

    const pBytes = L * B * H * T * T * 4;
    const act = B * T * C * 4; // one [B, T, C] float32 activation
    const att = plain.byOp.attention;
    const lines = [
      `4-layer causal attention stack, B=${B} T=${T} H=${H} D=${D} (forward ${((t1 - t0) / 1000).toFixed(1)} s, checkpointed ${((t2 - t1) / 1000).toFixed(1)} s, cpu backend)`,
      `  P, the T×T probabilities naive attention keeps (B·H·T·T·4 bytes × ${L} layers): ${formatBytes(pBytes)}`,
      `  held by the tape, plain:                 ${formatBytes(plain.bytes)}  = ${(plain.bytes / pBytes).toFixed(4)} of P`,
      `    of which attention (q, k, v, out, lse): ${formatBytes(att.bytes)}  = ${(att.bytes / pBytes).toFixed(4)} of P`,
      `  held by the tape, checkpoint() per block: ${formatBytes(ck.bytes)}  = ${(ck.bytes / pBytes).toFixed(4)} of P = ${(ck.bytes / (L * B * T * D * 4)).toFixed(2)} × layers·B·T·D·4 bytes`,
      formatMemoryReport(plain).replace(/^/gm, '  plain | '),
      formatMemoryReport(ck).replace(/^/gm, '  ckpt  | '),
    ];
    console.log(lines.join('\n'));

    expect(plain.bytes).toBeLessThan(pBytes / 10);
    expect(att.nodes).toBe(L);
    expect(att.bytes).toBe(L * (4 * act + B * H * T * 4));
    // checkpoint(): one [B, T, C] input per block and nothing else.
    expect(ck.bytes).toBe(L * act);
    expect(ck.byOp.checkpoint.nodes).toBe(L);
    expect(ck.bytes).toBeLessThan(plain.bytes / 5);
  });

  it('the same accounting finds P when attention is composed from matmul and softmax (T = 256)', async () => {
    const [B, T, H, D] = [1, 256, 2, 16];
    const rng = new Rng(2);
    const q = randn([B, T, H, D], { rng, requiresGrad: true });
    const k = randn([B, T, H, D], { rng, requiresGrad: true });
    const v = randn([B, T, H, D], { rng, requiresGrad: true });
    const naive = (() => {
      const qh = permute(q, [0, 2, 1, 3]); // [B, H, T, D]
      const kt = permute(k, [0, 2, 3, 1]); // [B, H, D, T]
      const vh = permute(v, [0, 2, 1, 3]);
      const p = softmax(scale(matmul(qh, kt), 1 / Math.sqrt(D))); // [B, H, T, T] — kept for backward
      return permute(matmul(p, vh), [0, 2, 1, 3]);
    })();
    const flash = await attention(q, k, v, { backend: BACKEND });
    const pBytes = B * H * T * T * 4;
    const n = memoryReport(naive);
    const f = memoryReport(flash);
    console.log(`T=${T}: naive attention keeps ${formatBytes(n.bytes)} (P = ${formatBytes(pBytes)}), the attention op ${formatBytes(f.bytes)}`);
    expect(n.byOp.softmax.byWhat.probs).toBe(pBytes);
    expect(n.bytes).toBeGreaterThanOrEqual(pBytes);
    expect(f.bytes).toBeLessThan(pBytes / 10);
    // Both compute the same thing.
    let err = 0;
    for (let i = 0; i < flash.size; i++) err = Math.max(err, Math.abs(flash.data[i] - naive.data[i]));
    expect(err).toBeLessThan(1e-5);
  });
});
