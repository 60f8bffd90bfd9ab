#!/usr/bin/env node
// Runs nvcc (argv[2]) with the remaining arguments plus `-Xptxas -v`, and fails the compile when
// ptxas reports that it serialised or patched the wgmma pipeline of a kernel (messages C75xx:
// C7514 serialised wgmmas, C7517/C7519 injected warpgroup.arrive/wait, ...). Those are "info"
// lines that exit 0, yet each one costs a Hopper kernel a large share of its speed, so a kernel
// change that brings one back must not build. The resource lines of -v are dropped; everything
// else nvcc prints is passed through.
import { spawnSync } from 'node:child_process';

const [nvcc, ...args] = process.argv.slice(2);
if (!nvcc) {
  console.error('usage: nvcc-strict.mjs NVCC ARGS...');
  process.exit(2);
}
const r = spawnSync(nvcc, [...args, '-Xptxas', '-v'], { encoding: 'utf8', maxBuffer: 64 << 20 });
if (r.error) {
  console.error(`nvcc-strict: cannot run ${nvcc}: ${r.error.message}`);
  process.exit(1);
}
const out = `${r.stdout ?? ''}${r.stderr ?? ''}`.split('\n');
const wgmma = out.filter((l) => /\(C75\d\d\)/.test(l));
const shown = out.filter((l) => l && !/^ptxas info\s+: (Used|Compiling|Function properties|Compile time)|bytes (stack frame|gmem|cmem)/.test(l) && !/\(C75\d\d\)/.test(l));
if (shown.length) process.stderr.write(`${shown.join('\n')}\n`);
if (wgmma.length) {
  process.stderr.write(`${wgmma.join('\n')}\nnvcc-strict: ptxas serialised or patched a wgmma pipeline (above); see packages/cuda/KERNEL_NOTES.md ("Build hygiene")\n`);
  process.exit(1);
}
process.exit(r.status ?? 1);
