/** gradcheck (float64 central differences) for every op of the tape. */
import { describe, it } from 'vitest';
import {
  add, sub, mul, scale, matmul, linear, reshape, permute, transpose, splitHeads, mergeHeads,
  layerNorm, gelu, softmax, crossEntropy, embedding, sum, mean, gradcheck, checkpoint, Tensor,
  rmsNorm, silu, swiglu, rotary, rotaryTables, dropout,
} from '@fa/autograd';
import { expectGradcheck, leaf } from './helpers.js';

const check = async (label: string, fn: (...xs: Tensor[]) => Tensor | Promise<Tensor>, inputs: Tensor[]) => {
  expectGradcheck(await gradcheck(fn, inputs), label);
  // The same function with float32 tape gradients against the float64 differences.
  expectGradcheck(await gradcheck(fn, inputs, { precision: 'float32' }), `${label} [float32 tape]`);
};

describe('gradcheck: elementwise ops', () => {
  it('add: same shape, bias broadcast, general broadcast, scalar', async () => {
    await check('add same shape', add, [leaf([3, 4], 1), leaf([3, 4], 2)]);
    await check('add bias [2,3,4]+[4]', add, [leaf([2, 3, 4], 3), leaf([4], 4)]);
    await check('add [2,1,4]+[3,1]', add, [leaf([2, 1, 4], 5), leaf([3, 1], 6)]);
    await check('add scalar', (x) => add(x, 2.5), [leaf([5], 7)]);
  });
  it('sub', async () => {
    await check('sub same shape', sub, [leaf([3, 4], 8), leaf([3, 4], 9)]);
    await check('sub broadcast [3,4]-[1,4]', sub, [leaf([3, 4], 10), leaf([1, 4], 11)]);
    await check('sub scalar', (x) => sub(x, 1), [leaf([4], 12)]);
  });
  it('mul: same shape, broadcast, scalar, one side constant', async () => {
    await check('mul same shape', mul, [leaf([3, 4], 13), leaf([3, 4], 14)]);
    await check('mul broadcast [2,3,4]*[3,1]', mul, [leaf([2, 3, 4], 15), leaf([3, 1], 16)]);
    await check('scale', (x) => scale(x, -0.75), [leaf([6], 17)]);
    await check('mul with a constant', (x, c) => mul(x, c), [leaf([2, 3], 18), leaf([2, 3], 19, { requiresGrad: false })]);
  });
  it('gelu (exact erf and tanh approximation), including the far tails', async () => {
    const x = leaf([40], 20, { std: 3 });
    x.data[0] = -7.5;
    x.data[1] = 6.2;
    x.data[2] = -4.4;
    await check('gelu', (t) => gelu(t), [x]);
    await check('gelu tanh', (t) => gelu(t, { approximate: 'tanh' }), [x]);
  });
});

describe('gradcheck: linear algebra and shapes', () => {
  it('matmul: 2-D, batched, batched × matrix, matrix × batched', async () => {
    await check('matmul 2-D', matmul, [leaf([3, 4], 21), leaf([4, 5], 22)]);
    await check('matmul batched', matmul, [leaf([2, 3, 3, 4], 23), leaf([2, 3, 4, 2], 24)]);
    await check('matmul batched × matrix', matmul, [leaf([2, 3, 4], 25), leaf([4, 5], 26)]);
    await check('matmul matrix × batched', matmul, [leaf([3, 4], 27), leaf([2, 4, 5], 28)]);
  });
  it('linear with and without bias', async () => {
    await check('linear', linear, [leaf([2, 3, 4], 29), leaf([5, 4], 30), leaf([5], 31)]);
    await check('linear no bias', (x, w) => linear(x, w), [leaf([3, 4], 32), leaf([2, 4], 33)]);
  });
  it('reshape, permute, transpose, splitHeads, mergeHeads', async () => {
    const w = leaf([2, 3, 4], 34, { requiresGrad: false });
    // A non-uniform weight after the shape op makes the check sensitive to element order.
    await check('reshape', (x) => mul(reshape(x, [6, -1]), reshape(w, [6, 4])), [leaf([2, 3, 4], 35)]);
    await check('permute', (x) => mul(permute(x, [2, 0, 1]), permute(w, [2, 0, 1])), [leaf([2, 3, 4], 36)]);
    await check('transpose', (x) => matmul(transpose(x, -1, -2), leaf([3, 2], 37, { requiresGrad: false })), [leaf([2, 3, 4], 38)]);
    await check('splitHeads/mergeHeads', (x) => mergeHeads(mul(splitHeads(x, 2), leaf([2, 3, 2, 2], 39, { requiresGrad: false }))), [leaf([2, 3, 4], 40)]);
  });
});

describe('gradcheck: the ops of LLaMA-style models', () => {
  it('rmsNorm with and without a weight', async () => {
    await check('rmsNorm', (x, w) => rmsNorm(x, w), [leaf([2, 3, 6], 141), leaf([6], 142)]);
    await check('rmsNorm plain', (x) => rmsNorm(x), [leaf([4, 5], 143)]);
  });
  it('silu and swiglu, including the tails', async () => {
    const x = leaf([30], 144, { std: 3 });
    x.data[0] = -9;
    x.data[1] = 7;
    await check('silu', (t) => silu(t), [x]);
    await check('swiglu', (a, b) => swiglu(a, b), [leaf([3, 8], 145, { std: 2 }), leaf([3, 8], 146)]);
  });
  it('dropout (the same mask forward and backward, drawn again from its key)', async () => {
    await check('dropout p 0.3', (t) => dropout(t, 0.3, { seed: 7, offset: 2 }), [leaf([5, 9], 148)]);
    await check('dropout p 0.9', (t) => dropout(t, 0.9, { seed: 2 ** 40 + 1 }), [leaf([37], 149)]);
  });
  it('rotary: NeoX halves and GPT-J pairs, a partial rotary dim, an offset', async () => {
    const w = leaf([2, 3, 2, 8], 147, { requiresGrad: false });
    const full = rotaryTables(16, 8), part = rotaryTables(16, 4);
    // a non-uniform weight after the rotation makes the check see every output element
    await check('rotary neox', (x) => mul(rotary(x, full), w), [leaf([2, 3, 2, 8], 148)]);
    await check('rotary gptj offset 5', (x) => mul(rotary(x, full, { interleaved: true, offset: 5 }), w), [leaf([2, 3, 2, 8], 149)]);
    await check('rotary partial', (x) => mul(rotary(x, part, { offset: 2 }), w), [leaf([2, 3, 2, 8], 150)]);
  });
});

describe('gradcheck: normalisation, losses, lookups, reductions', () => {
  it('layerNorm with and without affine parameters', async () => {
    await check('layerNorm', (x, g, b) => layerNorm(x, g, b), [leaf([2, 3, 6], 41), leaf([6], 42), leaf([6], 43)]);
    await check('layerNorm plain', (x) => layerNorm(x), [leaf([4, 5], 44)]);
  });
  it('softmax over the last and a middle dim', async () => {
    await check('softmax -1', (x) => softmax(x), [leaf([3, 5], 45)]);
    await check('softmax dim 1', (x) => softmax(x, 1), [leaf([2, 4, 3], 46)]);
  });
  it('crossEntropy: mean, sum, ignoreIndex', async () => {
    const t = Int32Array.from([0, 3, 2, 1, 4, 4]);
    await check('crossEntropy mean', (x) => crossEntropy(x, t), [leaf([6, 5], 47)]);
    await check('crossEntropy [2,3,5] sum', (x) => crossEntropy(x, t, { reduction: 'sum' }), [leaf([2, 3, 5], 48)]);
    await check('crossEntropy ignoreIndex', (x) => crossEntropy(x, [1, -100, 2, -100, 0, 3]), [leaf([6, 5], 49)]);
  });
  it('embedding with repeated ids', async () => {
    const w = leaf([3, 4, 2], 50, { requiresGrad: false });
    await check('embedding', (e) => mul(embedding([2, 0, 2, 1, 4, 2], e, [3, 2]), reshape(w, [3, 2, 4])), [leaf([5, 4], 51)]);
  });
  it('sum and mean', async () => {
    await check('sum', (x) => sum(mul(x, x)), [leaf([3, 4], 52)]);
    await check('mean', (x) => mean(mul(x, x)), [leaf([3, 4], 53)]);
  });
});

describe('gradcheck: composites', () => {
  it('a pre-LN attention block written with the ops (attention on the float64 path, cpu for float32)', async () => {
    const C = 8;
    const H = 2;
    const block = async (x: Tensor, g: Tensor, b: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, w1: Tensor, w2: Tensor) => {
      const h = layerNorm(x, g, b);
      const { attention } = await import('@fa/autograd');
      const y = await attention(splitHeads(linear(h, wq), H), splitHeads(linear(h, wk), 1), splitHeads(linear(h, wv), 1), { causal: true, backend: 'cpu' });
      const x1 = add(x, linear(mergeHeads(y), wo));
      return add(x1, linear(gelu(linear(x1, w1)), w2));
    };
    const inputs = [leaf([2, 5, C], 60), leaf([C], 61), leaf([C], 62), leaf([C, C], 63, { std: 0.4 }), leaf([C / H, C], 64, { std: 0.4 }), leaf([C / H, C], 65, { std: 0.4 }), leaf([C, C], 66, { std: 0.4 }), leaf([16, C], 67, { std: 0.4 }), leaf([C, 16], 68, { std: 0.4 })];
    await check('attention block', block as (...xs: Tensor[]) => Promise<Tensor>, inputs);
    await check('checkpointed attention block', ((...xs: Tensor[]) => checkpoint(block as (...a: Tensor[]) => Promise<Tensor>, ...xs)) as (...xs: Tensor[]) => Promise<Tensor>, inputs);
  });
});

describe('dropout on every host model engine', () => {
  it('the same mask and values on cpu, wasm and native as in float64, p = 0 the identity, bad options refused', async () => {
    const { setModelEngine, Tensor: T } = await import('@fa/autograd');
    // (the wasm package's build, as device.test.ts reaches webgpu's: autograd does not depend on it)
    const { createWasmBackend } = (await import(/* @vite-ignore */ new URL('../../wasm/dist/index.js', import.meta.url).href)) as { createWasmBackend: (o?: object) => Promise<{ name: string; dispose(): Promise<void> }> };
    const x = new T(Float32Array.from({ length: 777 }, (_, i) => Math.sin(i) + 0.1), [777]);
    const x64 = new T(Float64Array.from(x.data), [777]);
    const want = dropout(x64, 0.25, { seed: 99 }).data;
    const engines = [await createWasmBackend(), await createWasmBackend({ native: true })];
    try {
      for (const eng of [null, ...engines]) {
        setModelEngine(eng as never);
        const got = dropout(x, 0.25, { seed: 99 }).data;
        for (let i = 0; i < got.length; i++) {
          if ((got[i] === 0) !== (want[i] === 0)) throw new Error(`${eng?.name ?? 'cpu'}: element ${i} kept/dropped differently`);
          if (Math.abs(got[i] - want[i]) > 1e-6 * Math.abs(want[i])) throw new Error(`${eng?.name ?? 'cpu'}: element ${i} ${got[i]} vs ${want[i]}`);
        }
      }
    } finally {
      setModelEngine(null);
      for (const eng of engines) await eng.dispose();
    }
    if (dropout(x, 0, { seed: 1 }) !== x) throw new Error('p = 0 should return x itself');
    for (const bad of [() => dropout(x, 1, { seed: 1 }), () => dropout(x, 0.5, { seed: -1 }), () => dropout(x, 0.5, undefined as never)]) {
      let code = '';
      try {
        bad();
      } catch (e) {
        code = (e as { code?: string }).code ?? '';
      }
      if (code !== 'E_ARG') throw new Error(`expected E_ARG, got ${code || 'no error'}`);
    }
  });
});

describe("GPT's dropout", () => {
  it('drops nothing without a seed (evaluation), repeats by seed, and differs between seeds', async () => {
    const { GPT } = await import('@fa/autograd');
    const cfg = { vocab: 17, maxT: 8, dModel: 16, layers: 2, heads: 2, seed: 4 };
    const plain = new GPT(cfg), drop = new GPT({ ...cfg, dropout: 0.2 });
    const ids = Int32Array.from({ length: 16 }, (_, i) => (i * 5 + 2) % 17);
    const a = (await plain.forward(ids, 2)).data, b = (await drop.forward(ids, 2)).data;
    if (a.some((x, i) => x !== b[i])) throw new Error('dropout without a seed changed the logits');
    const s1 = (await drop.forward(ids, 2, { dropoutSeed: 1 })).data, s1b = (await drop.forward(ids, 2, { dropoutSeed: 1 })).data;
    const s2 = (await drop.forward(ids, 2, { dropoutSeed: 2 })).data;
    if (s1.some((x, i) => x !== s1b[i])) throw new Error('the same seed gave other logits');
    if (!s1.some((x, i) => x !== s2[i]) || !s1.some((x, i) => x !== a[i])) throw new Error('dropout with a seed changed nothing');
    let code = '';
    try {
      new GPT({ ...cfg, dropout: 1 });
    } catch (e) {
      code = (e as { code?: string }).code ?? '';
    }
    if (code !== 'E_ARG') throw new Error(`dropout 1: expected E_ARG, got ${code || 'no error'}`);
  });
});
