/**
 * The page the headless-Chromium test loads: runs a slice of the conformance kit against the
 * wasm engine, every case through its worker pool where the page has threads (inline threshold
 * 0; KV-cache key ranges split every 24 keys, so the split and merge run too), the KV-cache
 * cases with host caches and again with device caches (upload: read and appended in place), and
 * publishes the results on window.__fa.
 */
import { checkCase, checkKVCacheCase, conformanceCases, EXTRA_CHECKS, KV_EXTRA_CHECKS, kvCacheCases, type CaseResult } from '@fa/core/testing';
import { createWasmBackend } from '../../dist/index.js';

interface PageState {
  device?: string;
  threads?: number;
  isolated?: boolean;
  error?: string;
  results: CaseResult[];
  done: boolean;
}

declare global {
  interface Window {
    __fa: PageState;
  }
}

/** Prefix of the KV-cache cases run with device caches (browser.test.ts lists them so). */
export const DEVICE_CACHES = 'device caches: ';

const state: PageState = { results: [], done: false };
window.__fa = state;

async function main(): Promise<void> {
  const params = new URLSearchParams(location.search);
  const count = Number(params.get('count') ?? 48);
  const seed = Number(params.get('seed') ?? 3);
  const be = await createWasmBackend({ inlineBelowFlops: 0, kvChunk: 24 });
  state.device = be.device;
  state.threads = be.threads;
  state.isolated = (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === true;
  console.log(`page: ${be.device}, cross-origin isolated: ${state.isolated}`);
  for (const c of conformanceCases({ count, quick: true, seed })) {
    const r = await checkCase(be, c);
    state.results.push(r);
    if (!r.pass) console.log(`page: FAIL ${r.name} ${r.message}`);
  }
  for (const upload of [false, true]) {
    for (const c of kvCacheCases({ quick: true, seed })) {
      const got = await checkKVCacheCase(be, c, { upload });
      const r = upload ? { ...got, name: `${DEVICE_CACHES}${got.name}` } : got;
      state.results.push(r);
      if (!r.pass) console.log(`page: FAIL ${r.name} ${r.message}`);
    }
  }
  for (const x of [...EXTRA_CHECKS, ...KV_EXTRA_CHECKS]) {
    const r = await x.run(be);
    state.results.push(r);
    if (!r.pass) console.log(`page: FAIL ${r.name} ${r.message}`);
  }
  await be.dispose();
}

main().then(
  () => (state.done = true),
  (e: unknown) => {
    state.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    state.done = true;
  },
);
