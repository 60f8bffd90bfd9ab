#!/usr/bin/env node
// Prints the nvcc to use (or, with --home, the CUDA root); prints nothing and exits 1 if none.
// Looks at $FA_NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then PATH.
import { existsSync, realpathSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';

export function findNvcc(env = process.env, defaults = ['/usr/local/cuda/bin/nvcc']) {
  const cands = [];
  if (env.FA_NVCC) cands.push(env.FA_NVCC);
  for (const k of ['CUDA_HOME', 'CUDA_PATH']) if (env[k]) cands.push(join(env[k], 'bin', 'nvcc'));
  cands.push(...defaults);
  for (const d of (env.PATH ?? '').split(delimiter)) if (d) cands.push(join(d, 'nvcc'));
  for (const c of cands) if (existsSync(c)) return c;
  return undefined;
}

export function cudaHomeOf(nvcc, env = process.env) {
  if (env.CUDA_HOME && existsSync(join(env.CUDA_HOME, 'include', 'cuda_runtime_api.h'))) return env.CUDA_HOME;
  let real = nvcc;
  try { real = realpathSync(nvcc); } catch { /* keep */ }
  const home = dirname(dirname(real));
  if (existsSync(join(home, 'include', 'cuda_runtime_api.h'))) return home;
  return '/usr/local/cuda';
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const nvcc = findNvcc();
  if (!nvcc) process.exit(1);
  process.stdout.write(process.argv.includes('--home') ? cudaHomeOf(nvcc) : nvcc);
}
