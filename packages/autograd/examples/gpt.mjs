#!/usr/bin/env node
/**
 * A GPT-2-style character model trained on the repository's corpus (makeCorpus), then
 * generating with a KV cache: one script, any engine.
 *
 *   node packages/autograd/examples/gpt.mjs                       # the best engine here
 *   node packages/autograd/examples/gpt.mjs --backend wasm --seconds 10
 *   node packages/autograd/examples/gpt.mjs --backend webgpu --engine native
 *   node packages/autograd/examples/gpt.mjs --style gpt2         # learned positions, LayerNorm, GELU
 * *   node packages/autograd/examples/gpt.mjs --backend webgpu --device on   # the whole model on the GPU
 *
 * --device on (with --backend webgpu) keeps the model, its training and its generation (KV cache)
 * on the GPU. --backend names the attention engine (cpu, wasm, native, webgpu, cuda; default native where it
 * runs, else wasm); --engine the model-op engine (setModelEngine: the products, gelu, layerNorm,
 * cross-entropy, AdamW), default the attention engine when it has model ops, otherwise the best
 * host engine (native, wasm, cpu), said so in the output. The model: GPT (@fa/autograd),
 * LLaMA-style by default (rotary positions, RMSNorm, SwiGLU MLP; --style gpt2: learned positions,
 * LayerNorm, GELU), GQA attention through the FlashAttention op, a head tied to the token
 * embedding. Prints the loss as it falls, tokens/s, the memory naive attention
 * would need for the same step, the held-out loss, a generated paragraph, and a check that
 * generating with the cache gives the tokens recomputing the whole sequence gives.
 */
import { pathToFileURL } from 'node:url';
import { FAError, resolveBackend } from '@fa/core';
import { AdamW, GPT, Rng, charVocab, crossEntropy, isDeviceEngine, makeCorpus, noGrad, setModelEngine } from '@fa/autograd';
import { loadEngines } from './engines.mjs';

export const CONFIG = {
  backend: '',
  engine: '',
  device: '', // 'on': the whole model on the attention engine's device (webgpu): tensors, model ops, optimizer
  seconds: 20,
  steps: 0, // > 0: train this many steps instead of for --seconds
  T: 128,
  batch: 8,
  layers: 3,
  dModel: 96,
  heads: 4,
  kvHeads: 2,
  lr: 6e-3,
  generate: 0, // 0: up to the trained window (T - prompt); positions past T were never trained
  temperature: 0.7,
  seed: 1,
  style: 'llama', // rotary positions, RMSNorm, SwiGLU MLP; or 'gpt2': learned positions, LayerNorm, GELU
};

const fmtBytes = (/** @type {number} */ b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(1)} GiB` : b >= 2 ** 20 ? `${(b / 2 ** 20).toFixed(1)} MiB` : `${(b / 1024).toFixed(1)} KiB`);

/**
 * The attention engine and the model-op engine for the choices (empty: the defaults).
 * @param {string} backend
 * @param {string} engine
 */
export async function pickEngines(backend, engine) {
  const want = backend || 'native';
  await loadEngines([...new Set([want, engine || want, 'native', 'wasm'].filter(Boolean))].join(','));
  const attn = await resolveBackend(backend || 'native').catch(async (e) => {
    if (backend) throw e;
    return resolveBackend('wasm');
  });
  let model = engine ? await resolveBackend(engine) : attn;
  let note = '';
  if (!engine && !model.modelOps) {
    // an attention-only engine: the model ops run on the best host engine, and we say so
    for (const name of ['native', 'wasm', 'cpu']) {
      const m = await resolveBackend(name).catch(() => undefined);
      if (m?.modelOps) {
        note = ` (${attn.name} has no model ops yet: they run on ${name})`;
        model = m;
        break;
      }
    }
  }
  return { attn, model, note };
}

/**
 * Random training windows: ids [B·T] and their next characters.
 * @param {Int32Array} data
 * @param {number} B
 * @param {number} T
 * @param {Rng} rng
 */
function batchOf(data, B, T, rng) {
  const ids = new Int32Array(B * T), targets = new Int32Array(B * T);
  for (let b = 0; b < B; b++) {
    const s = Math.floor(rng.random() * (data.length - T - 1));
    ids.set(data.subarray(s, s + T), b * T);
    targets.set(data.subarray(s + 1, s + T + 1), b * T);
  }
  return { ids, targets };
}

/**
 * Trains for cfg.seconds (or cfg.steps), then generates. `log` gets each line.
 * @param {Partial<typeof CONFIG>} [overrides]
 * @param {(line: string) => void} [log]
 */
export async function run(overrides = {}, log = (/** @type {string} */ _line) => {}) {
  const cfg = { ...CONFIG, ...overrides };
  const { attn, model: modelEngine, note } = await pickEngines(cfg.backend, cfg.engine);
  const ops = setModelEngine(modelEngine);
  const text = makeCorpus(220_000, 7);
  const vocab = charVocab(text);
  const all = vocab.encode(text);
  const split = Math.floor(all.length * 0.9);
  const train = all.subarray(0, split), heldOut = all.subarray(split);
  const prompt = vocab.encode('the old farmer ');
  const genN = cfg.generate > 0 ? cfg.generate : cfg.T - prompt.length;
  if (cfg.style !== 'gpt2' && cfg.style !== 'llama') throw new FAError('E_ARG', `--style must be gpt2 or llama, got ${cfg.style}`);
  const llama = cfg.style === 'llama' ? /** @type {const} */ ({ positions: 'rotary', norm: 'rms', mlp: 'swiglu', mlpRatio: 8 / 3 }) : {};
  const model = new GPT({ vocab: vocab.size, maxT: Math.max(cfg.T, prompt.length + genN), dModel: cfg.dModel, layers: cfg.layers, heads: cfg.heads, kvHeads: cfg.kvHeads, backend: attn, seed: cfg.seed, ...llama });
  const params = model.parameters().reduce((n, p) => n + p.size, 0);
  const onDevice = cfg.device === 'on';
  if (cfg.device !== '' && !onDevice) throw new FAError('E_ARG', `--device takes 'on', got ${cfg.device}`);
  if (onDevice && !isDeviceEngine(attn)) throw new FAError('E_UNSUPPORTED', `--device on: the ${attn.name} engine has no device model ops (webgpu has them): use --backend webgpu`);
  if (onDevice) await model.to(/** @type {import('@fa/autograd').DeviceEngine} */ (/** @type {unknown} */ (attn)));
  const opt = new AdamW(model.parameters(), { lr: cfg.lr, weightDecay: 0.01 });
  const rng = new Rng(cfg.seed);
  const { B, T } = { B: cfg.batch, T: cfg.T };
  log(`GPT (${cfg.style}): ${cfg.layers} layers, d_model ${cfg.dModel}, ${cfg.heads} heads over ${cfg.kvHeads} kv heads, vocab ${vocab.size} characters, ${(params / 1e6).toFixed(2)}M parameters; corpus ${text.length} characters (makeCorpus)`);
  log(onDevice ? `every tensor, op and optimizer state on ${attn.name} (${attn.device ?? ''})` : `attention on ${attn.name} (${attn.device ?? ''}); model ops on ${ops.engine} (${ops.kernel})${note}`);
  /** @type {any[]} */
  const losses = []; // numbers, or the device's loss tensors until read
  const t0 = performance.now();
  let step = 0, tokens = 0;
  const lr0 = cfg.lr;
  while (cfg.steps > 0 ? step < cfg.steps : performance.now() - t0 < cfg.seconds * 1000) {
    step++;
    opt.lr = lr0 * Math.min(1, step / 30);
    const { ids, targets } = batchOf(train, B, T, rng);
    opt.zeroGrad();
    const loss = crossEntropy(await model.forward(ids, B), targets);
    await loss.backward();
    opt.step();
    tokens += B * T;
    // (on the device a loss is read only when it is logged: reading waits for the GPU)
    losses.push(onDevice ? loss : loss.item());
    if (step === 1 || step % 25 === 0) {
      const v = onDevice ? await loss.value() : loss.item();
      const s = (performance.now() - t0) / 1000;
      log(`step ${String(step).padStart(4)}  loss ${v.toFixed(3)}  ${(tokens / s).toFixed(0)} tokens/s  ${s.toFixed(1)} s`);
    }
  }
  if (onDevice) for (let i = 0; i < losses.length; i++) losses[i] = await losses[i].value();
  const seconds = (performance.now() - t0) / 1000;
  // the held-out loss, no graph
  const held = await noGrad(async () => {
    let sum = 0, n = 0;
    const r = new Rng(99);
    for (let i = 0; i < 4; i++) {
      const { ids, targets } = batchOf(heldOut, B, T, r);
      sum += await crossEntropy(await model.forward(ids, B), targets).value();
      n++;
    }
    return sum / n;
  });
  // what naive attention would hold for this step: P (B·H·T² floats) kept per layer for the backward
  const naive = cfg.layers * B * cfg.heads * T * T * 4;
  const flashSaved = cfg.layers * B * cfg.heads * T * 4; // the LSE rows the backward needs instead
  log(`trained ${step} steps in ${seconds.toFixed(1)} s: ${(tokens / seconds).toFixed(0)} tokens/s; loss ${losses[0].toFixed(3)} → ${(losses.at(-1) ?? NaN).toFixed(3)} (held-out ${held.toFixed(3)}; ln ${vocab.size} = ${Math.log(vocab.size).toFixed(3)})`);
  log(`attention memory of a step: naive attention keeps P for the backward, ${fmtBytes(naive)}; FlashAttention keeps the LSE, ${fmtBytes(flashSaved)}`);
  // generation with the KV cache, and the same greedy tokens recomputing the whole sequence
  const gen = await model.generate(prompt, genN, { temperature: cfg.temperature, rng: new Rng(cfg.seed + 5) });
  log(`generated (KV cache, temperature ${cfg.temperature}):\n  ${vocab.decode(prompt)}${vocab.decode(gen).replace(/\n/g, '\n  ')}`);
  const n = 24;
  const tg0 = performance.now();
  const greedy = await model.generate(prompt, n);
  const cachedMs = performance.now() - tg0;
  const seq = Array.from(prompt);
  const tr0 = performance.now();
  await noGrad(async () => {
    for (let i = 0; i < n; i++) {
      const logits = await model.forward(Int32Array.from(seq), 1);
      const all = logits.onDevice ? (await logits.toHost()).data : logits.data;
      const row = all.subarray(all.length - vocab.size);
      let best = 0;
      for (let j = 1; j < row.length; j++) if (row[j] > row[best]) best = j;
      seq.push(best);
    }
  });
  const recomputeMs = performance.now() - tr0;
  const same = seq.slice(prompt.length).every((t, i) => t === greedy[i]);
  log(`greedy, ${n} tokens: with the cache "${vocab.decode(greedy)}" (${cachedMs.toFixed(0)} ms), recomputing ${same ? 'the same' : `"${vocab.decode(seq.slice(prompt.length))}"`} (${recomputeMs.toFixed(0)} ms)`);
  setModelEngine(null);
  return { steps: step, seconds, tokensPerSecond: tokens / seconds, firstLoss: losses[0], lastLoss: losses.at(-1) ?? NaN, heldOut: held, same, text: vocab.decode(gen), attention: attn.name, modelOps: ops.engine };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  /** @type {Record<string, string | number>} */
  const args = {};
  for (let i = 2; i < process.argv.length; i += 2) {
    const key = process.argv[i].replace(/^--/, '');
    if (!(key in CONFIG)) throw new FAError('E_ARG', `unknown option ${process.argv[i]}; options: ${Object.keys(CONFIG).map((k) => `--${k}`).join(' ')}`);
    args[key] = typeof CONFIG[/** @type {keyof typeof CONFIG} */ (key)] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
  }
  const r = await run(/** @type {Partial<typeof CONFIG>} */ (args), (line) => console.log(line));
  process.exit(r.same && r.lastLoss < r.firstLoss ? 0 : 1);
}
