/**
 * Where a prebuilt addon for this machine lives: the ecosystem's layout, as prebuildify writes
 * it and node-gyp-build reads it — prebuilds/<platform>-<arch>/<tags>.node, tags such as
 * "node.napi.glibc" (runtime, Node-API instead of one ABI, libc). The same rules as
 * node-gyp-build's lookup, for a Node-API addon, in a few lines instead of a dependency: its
 * install step would run a plain `node-gyp rebuild` (without our nvcc discovery, failing the
 * install where nvcc is missing) and its loader throws where ours returns a reason.
 * Used by the loader (native.ts) and by the install script (scripts/build-native.mjs).
 */
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const PREBUILDS_DIR = join(PACKAGE_ROOT, 'prebuilds');

export interface Target {
  readonly platform: string;
  readonly arch: string;
  readonly libc: 'glibc' | 'musl';
}

/** This process's target; musl on Alpine, as node-gyp-build decides. */
export function currentTarget(): Target {
  const libc = process.env.LIBC === 'musl' || (process.platform === 'linux' && existsSync('/etc/alpine-release')) ? 'musl' : 'glibc';
  return { platform: process.platform, arch: process.arch, libc };
}

/** The file name the prebuild script writes for a target (prebuildify --napi --tag-libc). */
export function prebuiltName(t: Target): string {
  return t.platform === 'linux' ? `node.napi.${t.libc}.node` : 'node.napi.node';
}

interface Tags {
  readonly file: string;
  readonly specificity: number;
  readonly runtime?: string;
  readonly napi: boolean;
  readonly abi?: string;
  readonly libc?: string;
  readonly other: boolean;
}

function parseTags(file: string): Tags | undefined {
  const parts = file.split('.');
  if (parts.pop() !== 'node') return undefined;
  let runtime: string | undefined, abi: string | undefined, libc: string | undefined;
  let napi = false, other = false, specificity = 0;
  for (const tag of parts) {
    if (tag === 'node' || tag === 'electron' || tag === 'node-webkit') runtime = tag;
    else if (tag === 'napi') napi = true;
    else if (/^abi\d+$/.test(tag)) abi = tag.slice(3);
    else if (tag === 'glibc' || tag === 'musl') libc = tag;
    else if (/^(uv|armv)\d+$/.test(tag)) other = true; // not built by us: never matched
    else continue;
    specificity++;
  }
  return { file, specificity, runtime, napi, abi, libc, other };
}

/**
 * The prebuilt addons that fit `t`, best first (node-gyp-build's order: a matching folder, then
 * files whose tags all match, the most specific first). `dir` defaults to this package's.
 */
export function findPrebuilts(t: Target = currentTarget(), dir = PREBUILDS_DIR): string[] {
  let folders: string[];
  try {
    folders = readdirSync(dir);
  } catch {
    return [];
  }
  const out: string[] = [];
  const tuples = folders
    .map((name) => ({ name, parts: name.split('-') }))
    .filter((x) => x.parts.length === 2 && x.parts[0] === t.platform && x.parts[1].split('+').includes(t.arch))
    .sort((a, b) => a.parts[1].split('+').length - b.parts[1].split('+').length);
  for (const tuple of tuples) {
    let files: string[];
    try {
      files = readdirSync(join(dir, tuple.name));
    } catch {
      continue;
    }
    const fits = files
      .map(parseTags)
      .filter((x): x is Tags => x !== undefined)
      .filter((x) => !x.other && (x.runtime === undefined || x.runtime === 'node') && (x.abi === undefined || x.napi || x.abi === process.versions.modules) && (x.libc === undefined || x.libc === t.libc))
      .sort((a, b) => Number(Boolean(b.abi)) - Number(Boolean(a.abi)) || b.specificity - a.specificity);
    out.push(...fits.map((x) => join(dir, tuple.name, x.file)));
  }
  return out;
}
