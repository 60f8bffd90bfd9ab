/**
 * Loading the shipped binaries (wasm/*.wasm, next to dist/ in the package): read from disk in
 * Node, fetched in browsers (bundlers that understand `new URL(…, import.meta.url)`, such as
 * Vite, copy them as assets). Each binary is compiled once per process and shared with every
 * worker (a WebAssembly.Module crosses postMessage without recompiling).
 */
import { FAError } from '@fa/core';
import { isNode } from './features.js';

const compiled = new Map<string, Promise<WebAssembly.Module>>();

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

/** Where a binary lives: `base` (a folder URL, e.g. a CDN) or the package's own wasm/ folder. */
export function binaryUrl(name: string, base?: string | URL): URL {
  if (base !== undefined) return new URL(name, base.toString().endsWith('/') ? base : `${base.toString()}/`);
  return new URL(`../wasm/${name}`, import.meta.url);
}

async function readBytes(url: URL): Promise<ArrayBuffer | Uint8Array> {
  if (url.protocol === 'file:' && isNode()) {
    const fs = (await importNode('node:fs/promises')) as typeof import('node:fs/promises');
    return fs.readFile(url);
  }
  const res = await fetch(url);
  if (!res.ok) throw new Error(`HTTP ${res.status} for ${url.href}`);
  return res.arrayBuffer();
}

/** The compiled module for a binary (cached per URL). */
export function compileBinary(url: URL): Promise<WebAssembly.Module> {
  let m = compiled.get(url.href);
  if (!m) {
    m = (async () => {
      let bytes: ArrayBuffer | Uint8Array;
      try {
        bytes = await readBytes(url);
      } catch (e) {
        throw new FAError('E_IO', `could not read the WebAssembly binary ${url.href}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
      try {
        return await WebAssembly.compile(bytes as BufferSource);
      } catch (e) {
        throw new FAError('E_DEVICE', `could not compile ${url.href}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
    })();
    m.catch(() => compiled.delete(url.href));
    compiled.set(url.href, m);
  }
  return m;
}
