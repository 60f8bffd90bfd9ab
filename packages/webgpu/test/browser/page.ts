/**
 * The page the headless-Chromium test loads: runs a slice of the conformance kit against the
 * WebGPU engine on navigator.gpu and publishes the results on window.__fa.
 */
import { checkCase, checkKVCacheCase, conformanceCases, EXTRA_CHECKS, KV_EXTRA_CHECKS, kvCacheCases, type CaseResult } from '@fa/core/testing';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-webgpu';
import { createWebGPUBackend } from '../../dist/index.js';
import { TFJS_ROUNDTRIP, tfjsRoundTrip } from '../tfjs-roundtrip.js';

interface PageState {
  device?: string;
  generic?: boolean;
  error?: string;
  results: CaseResult[];
  done: boolean;
}

declare global {
  interface Window {
    __fa: PageState;
  }
}

const state: PageState = { results: [], done: false };
window.__fa = state;

async function main(): Promise<void> {
  const params = new URLSearchParams(location.search);
  const count = Number(params.get('count') ?? 48);
  const seed = Number(params.get('seed') ?? 3);
  const be = await createWebGPUBackend();
  state.device = be.device;
  state.generic = be.generic;
  console.log(`page: ${be.device}, ${be.generic ? 'generic' : 'specialised'} kernels`);
  const cases = conformanceCases({ count, quick: true, seed });
  for (const c of cases) {
    const r = await checkCase(be, c);
    state.results.push(r);
    console.log(`page: ${r.pass ? (r.skipped ? 'skip' : 'ok  ') : 'FAIL'} ${r.name} ${r.pass ? '' : r.message}`);
  }
  // the KV-cache cases (host caches and index arrays, or the cases' own index tensors)
  for (const c of kvCacheCases({ quick: true, seed })) {
    const r = await checkKVCacheCase(be, c);
    state.results.push(r);
    console.log(`page: ${r.pass ? (r.skipped ? 'skip' : 'ok  ') : 'FAIL'} ${r.name} ${r.pass ? '' : r.message}`);
  }
  for (const x of [...EXTRA_CHECKS, ...KV_EXTRA_CHECKS]) {
    const r = await x.run(be);
    state.results.push(r);
    console.log(`page: ${r.pass ? "ok  " : "FAIL"} ${r.name} ${r.pass ? "" : r.message}`);
  }
  await be.dispose();
  // a tfjs program's buffers in and out, on tfjs's device (issue 24)
  const t0 = performance.now();
  let r: CaseResult;
  try {
    tf.env().set('WEBGPU_CPU_FORWARD', false);
    if (!(await tf.setBackend('webgpu'))) throw new Error('tfjs found no WebGPU adapter');
    r = { name: TFJS_ROUNDTRIP, pass: true, metrics: [], message: await tfjsRoundTrip(tf), ms: performance.now() - t0 };
  } catch (e) {
    r = { name: TFJS_ROUNDTRIP, pass: false, metrics: [], message: e instanceof Error ? e.message : String(e), ms: performance.now() - t0 };
  }
  state.results.push(r);
  console.log(`page: ${r.pass ? 'ok  ' : 'FAIL'} ${r.name} ${r.message}`);
}

main().then(
  () => (state.done = true),
  (e: unknown) => {
    state.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    state.done = true;
  },
);
