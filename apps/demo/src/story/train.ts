/**
 * Part 9 of the story: a model on the engines. A small LLaMA-style GPT (@fa/autograd: rotary
 * positions, RMSNorm, SwiGLU, GQA, tied head) trains for a few
 * seconds on characters of the repository's corpus (makeCorpus), with attention on the story's
 * engine and every other op on the model engine (the engine itself when it has model ops, else
 * the best host engine, said so) — or, on a WebGPU engine with a GPU adapter, every tensor on the
 * device — then generates with a KV cache, checked against recomputing the whole sequence. Runs
 * in Node and in browsers: no node:* imports.
 */
import type { AttentionBackend } from '@fa/core';
import { AdamW, GPT, Rng, charVocab, crossEntropy, isDeviceEngine, makeCorpus, noGrad, setModelEngine, type DeviceEngine } from '@fa/autograd';

export interface TrainingConfig {
  readonly seconds: number;
  readonly T: number;
  readonly batch: number;
  readonly layers: number;
  readonly dModel: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly seed: number;
  /**
   * Train with every tensor on the attention engine's device (its model ops there): 'auto'
   * (default) where the engine has device ops on a GPU (a WebGPU engine on a hardware adapter;
   * on a CPU adapter the host engines are faster), or forced on or off.
   */
  readonly onDevice?: 'auto' | boolean;
}

export const TRAIN_DEFAULTS: TrainingConfig = { seconds: 8, T: 128, batch: 8, layers: 3, dModel: 96, heads: 4, kvHeads: 2, seed: 1 };

export interface TrainingResult {
  readonly config: TrainingConfig;
  readonly attention: string;
  /** The engine of the other ops, its kernel, and why it is not the attention engine (if not). */
  readonly modelOps: { readonly engine: string; readonly kernel: string; readonly note?: string };
  readonly parameters: number;
  readonly vocab: number;
  readonly corpusChars: number;
  readonly steps: number;
  readonly seconds: number;
  readonly tokensPerSecond: number;
  /** The loss at the first step and after each quarter of the run (step, loss). */
  readonly curve: readonly (readonly [number, number])[];
  readonly firstLoss: number;
  readonly lastLoss: number;
  readonly heldOutLoss: number;
  /** Bytes naive attention keeps for this step's backward (P, every layer) against the LSE rows FlashAttention keeps. */
  readonly naiveBytes: number;
  readonly flashBytes: number;
  readonly prompt: string;
  readonly generated: string;
  /** Greedy tokens with the KV cache equal recomputing the whole sequence. */
  readonly cachedEqualsRecomputed: boolean;
}

/**
 * Trains and generates. `hostEngines` are the engines with model ops to fall back on, best first
 * (native, wasm, cpu), for an attention engine that has none; `onStep` sees the loss as it falls.
 */
export async function runTraining(attn: AttentionBackend, hostEngines: readonly AttentionBackend[], cfg: TrainingConfig = TRAIN_DEFAULTS, onStep?: (step: number, loss: number, seconds: number) => void): Promise<TrainingResult> {
  const deviceOk = isDeviceEngine(attn);
  const onDevice = cfg.onDevice === true ? deviceOk : cfg.onDevice === false ? false : deviceOk && (attn as { generic?: boolean }).generic === false;
  if (cfg.onDevice === true && !deviceOk) throw new Error(`onDevice: the ${attn.name} engine has no device model ops`);
  let engine = attn.modelOps ? attn : hostEngines.find((e) => e.modelOps);
  if (!engine) throw new Error('no engine with model ops (cpu always has them)');
  const note = onDevice || engine === attn ? undefined : `${attn.name} has no model ops yet`;
  const ops = onDevice ? { engine: attn.name, kernel: 'every tensor, op and optimizer state on the device' } : setModelEngine(engine);
  try {
    const text = makeCorpus(220_000, 7);
    const vocab = charVocab(text);
    const all = vocab.encode(text);
    const split = Math.floor(all.length * 0.9);
    const train = all.subarray(0, split), held = all.subarray(split);
    const { T, batch: B } = cfg;
    const prompt = 'the old farmer ';
    // LLaMA-style: rotary positions, RMSNorm, SwiGLU (it learns this corpus faster than GPT-2's layout)
    const model = new GPT({ vocab: vocab.size, maxT: T, dModel: cfg.dModel, layers: cfg.layers, heads: cfg.heads, kvHeads: cfg.kvHeads, backend: attn, seed: cfg.seed, positions: 'rotary', norm: 'rms', mlp: 'swiglu', mlpRatio: 8 / 3 });
    const parameters = model.parameters().reduce((n, p) => n + p.size, 0);
    if (onDevice) await model.to(attn as unknown as DeviceEngine);
    const opt = new AdamW(model.parameters(), { lr: 6e-3, weightDecay: 0.01 });
    const rng = new Rng(cfg.seed);
    const windows = (data: Int32Array, r: Rng) => {
      const ids = new Int32Array(B * T), targets = new Int32Array(B * T);
      for (let b = 0; b < B; b++) {
        const s = Math.floor(r.random() * (data.length - T - 1));
        ids.set(data.subarray(s, s + T), b * T);
        targets.set(data.subarray(s + 1, s + T + 1), b * T);
      }
      return { ids, targets };
    };
    const losses: number[] = [];
    const t0 = performance.now();
    let steps = 0;
    while (performance.now() - t0 < cfg.seconds * 1000 || steps < 2) {
      steps++;
      opt.lr = 6e-3 * Math.min(1, steps / 30);
      const { ids, targets } = windows(train, rng);
      opt.zeroGrad();
      const loss = crossEntropy(await model.forward(ids, B), targets);
      await loss.backward();
      opt.step();
      losses.push(onDevice ? await loss.value() : loss.item()); // (on the device: a read a step, for the live curve)
      onStep?.(steps, losses[losses.length - 1], (performance.now() - t0) / 1000);
    }
    const seconds = (performance.now() - t0) / 1000;
    const heldOutLoss = await noGrad(async () => {
      const r = new Rng(99);
      let s = 0;
      for (let i = 0; i < 4; i++) {
        const { ids, targets } = windows(held, r);
        s += await crossEntropy(await model.forward(ids, B), targets).value();
      }
      return s / 4;
    });
    const p = vocab.encode(prompt);
    const generated = vocab.decode(await model.generate(p, T - p.length, { temperature: 0.7, rng: new Rng(cfg.seed + 5) }));
    // greedy with the cache against recomputing the whole sequence for each token
    const n = 16;
    const greedy = await model.generate(p, n);
    const seq = Array.from(p);
    await noGrad(async () => {
      for (let i = 0; i < n; i++) {
        const logits = await model.forward(Int32Array.from(seq), 1);
        const row = (logits.onDevice ? (await logits.toHost()).data : logits.data).subarray(-vocab.size);
        let best = 0;
        for (let j = 1; j < row.length; j++) if (row[j] > row[best]) best = j;
        seq.push(best);
      }
    });
    // the loss at the start and after each quarter of the run
    const curve = [0.25, 0.5, 0.75, 1].map((f) => {
      const s = Math.max(1, Math.round(f * losses.length));
      return [s, losses[s - 1]] as const;
    });
    return {
      config: cfg,
      attention: attn.name,
      modelOps: { engine: ops.engine, kernel: ops.kernel, ...(note ? { note } : {}) },
      parameters,
      vocab: vocab.size,
      corpusChars: text.length,
      steps,
      seconds,
      tokensPerSecond: (steps * B * T) / seconds,
      curve: [[1, losses[0]], ...curve],
      firstLoss: losses[0],
      lastLoss: losses[losses.length - 1],
      heldOutLoss,
      naiveBytes: cfg.layers * B * cfg.heads * T * T * 4,
      flashBytes: cfg.layers * B * cfg.heads * T * 4,
      prompt,
      generated,
      cachedEqualsRecomputed: seq.slice(p.length).every((t, i) => t === greedy[i]),
    };
  } finally {
    setModelEngine(null);
  }
}
