// Builds the fake libnccl.so.2 of fixtures/fake-nccl.c with the C compiler (cc), or says why not.
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const src = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'fake-nccl.c');

/** The path of a fake NCCL library of that version (code as NCCL_VERSION_CODE), or a reason string. */
export function buildFakeNccl(version: number, partial = false): { path: string } | { reason: string } {
  const dir = mkdtempSync(join(tmpdir(), 'fa-fake-nccl-'));
  const path = join(dir, 'libnccl.so.2');
  const r = spawnSync('cc', ['-shared', '-fPIC', '-O1', `-DFAKE_VERSION=${version}`, ...(partial ? ['-DFAKE_PARTIAL'] : []), '-o', path, src], { encoding: 'utf8' });
  if (r.error) return { reason: `no C compiler (cc): ${r.error.message}` };
  if (r.status !== 0) return { reason: `cc failed: ${r.stderr}` };
  return { path };
}
