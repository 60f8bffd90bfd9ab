// A quick look at one shape (T from env, default 2048; f32, H 8, D 64): the native engine, the wasm engine
// (NOWASM=1 skips it) and ORT's MultiHeadAttention, alternating, median of 7; BWD=1 adds native's backward.
import { createRequire } from 'node:module';
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';
const peers = createRequire(new URL('../bench/peers/', import.meta.url));
const ort = peers('onnxruntime-node');
const H=8,D=64; const T=Number(process.env.T??2048);
const sess={}; for (const c of [false,true]) sess[c]=await ort.InferenceSession.create(new URL(`../bench/models/mha-h${H}${c?'-causal':''}.onnx`, import.meta.url).pathname,{intraOpNumThreads:2,interOpNumThreads:1,executionProviders:['cpu'],graphOptimizationLevel:'all'});
const nat = await createWasmBackend({native:true}); await nat.warm();
const wasm = process.env.NOWASM ? null : await createWasmBackend(); if (wasm) await wasm.warm();
const r=(n)=>{const a=new Float32Array(n);for(let i=0;i<n;i++)a[i]=Math.random()-0.5;return a};
const n=T*H*D, qd=r(n),kd=r(n),vd=r(n);
const q=tensor(qd,[1,T,H,D],'f32'),k=tensor(kd,[1,T,H,D],'f32'),v=tensor(vd,[1,T,H,D],'f32');
for (const causal of [false,true]) {
  const flops=4*H*T*T*D/(causal?2:1);
  const feeds={q:new ort.Tensor('float32',qd,[1,T,H*D]),k:new ort.Tensor('float32',kd,[1,T,H*D]),v:new ort.Tensor('float32',vd,[1,T,H*D])};
  const eng=[['native',()=>nat.forward(q,k,v,{causal})],['ort',()=>sess[causal].run(feeds)]]; if(wasm) eng.push(['wasm',()=>wasm.forward(q,k,v,{causal})]);
  const t={}; for(const [nm] of eng) t[nm]=[];
  const gap=Number(process.env.GAP_MS??0); // ORT's threads spin for a while after a run: a gap keeps that off the next engine's clock
  for(let rep=-1;rep<7;rep++) for(const [nm,f] of eng){if(gap) await new Promise((r)=>setTimeout(r,gap)); const t0=performance.now(); await f(); if(rep>=0)t[nm].push(performance.now()-t0);}
  const med=(x)=>x.sort((a,b)=>a-b)[3];
  console.log(`T=${T} causal=${causal}`, Object.entries(t).map(([nm,x])=>`${nm} ${(flops/med(x)/1e6).toFixed(1)}`).join(' | '), ' native/ort', (med(t.ort)/med(t.native)).toFixed(2));
}
if (process.env.BWD) { const f=await nat.forward(q,k,v,{}); const dO=tensor(r(n),[1,T,H,D],'f32'); const ts=[]; for(let i=0;i<4;i++){const t0=performance.now(); await nat.backward(q,k,v,f.out,dO,f.lse,{}); ts.push(performance.now()-t0);} console.log('bwd native', (10*H*T*T*D/Math.min(...ts)/1e6).toFixed(1)); }
await nat.dispose(); if (wasm) await wasm.dispose();
