#!/usr/bin/env node
// Builds the peer test addon (peer.cu) with nvcc into build/peer/peer.node under the package:
//   node test/peer/build.mjs      (exit 1 with the reason when nvcc is not found)
// The interop test builds it when nvcc is there, and skips with the reason otherwise.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findNvcc } from '../../scripts/find-nvcc.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const PEER_PATH = join(here, '..', '..', 'build', 'peer', 'peer.node');

/** Builds the addon; returns null, or why it could not be built. */
export function buildPeer() {
  const nvcc = findNvcc();
  if (!nvcc) return 'nvcc not found (the peer test addon needs a CUDA toolkit to build)';
  mkdirSync(dirname(PEER_PATH), { recursive: true });
  const nodeInc = process.env.npm_config_nodedir ? join(process.env.npm_config_nodedir, 'include', 'node') : '/usr/include/node';
  const r = spawnSync(nvcc, ['-O2', '-std=c++17', '-shared', '-Xcompiler', '-fPIC', `-I${nodeInc}`, '-DNODE_GYP_MODULE_NAME=peer',
    '-gencode=arch=compute_90a,code=sm_90a', '-gencode=arch=compute_80,code=sm_80', join(here, 'peer.cu'), '-o', PEER_PATH,
    '-cudart=static', '-ldl', '-lrt', '-lpthread'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return `nvcc failed: ${r.error?.message ?? r.stderr.slice(0, 2000)}`;
  return null;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const why = buildPeer();
  if (why) {
    console.error(`peer: ${why}`);
    process.exit(1);
  }
  console.log(`peer: ${PEER_PATH}`);
}
