// NCCL is loaded at run time. This machine (like CI) has none: the feature must say exactly
// what it tried and how to fix it, and everything else must keep working. Libraries that are
// not NCCL, or too old, are refused with the reason (fake ones are built with cc). A complete
// fake NCCL is loaded in nccl-fake.test.ts (a separate process: a success stays loaded).
import { createCpuBackend, FAError, listBackends, resolveBackend, tensor } from '@fa/core';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CudaBackend, createNcclCommunicator, loadNative, ncclCandidates, ncclStatus } from '../src/index.js';
import { buildFakeNccl } from './helpers/fake-nccl.js';

const native = loadNative();
const hasSystemNccl = native.ok && ncclStatus({}).available;

describe('where NCCL is looked for', () => {
  it('FA_NCCL_LIB alone when set (a file, or a directory holding libnccl.so.2)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fa-nccl-dir-'));
    expect(ncclCandidates({ FA_NCCL_LIB: '/x/libnccl.so.2.21.5' })).toEqual(['/x/libnccl.so.2.21.5']);
    expect(ncclCandidates({ FA_NCCL_LIB: dir })).toEqual([join(dir, 'libnccl.so.2')]);
  });

  it('otherwise the soname first, then existing copies, including a Python environment\'s nvidia/nccl/lib', () => {
    const venv = mkdtempSync(join(tmpdir(), 'fa-venv-'));
    const lib = join(venv, 'lib', 'python3.12', 'site-packages', 'nvidia', 'nccl', 'lib');
    mkdirSync(lib, { recursive: true });
    writeFileSync(join(lib, 'libnccl.so.2'), '');
    const c = ncclCandidates({ VIRTUAL_ENV: venv });
    expect(c[0]).toBe('libnccl.so.2');
    expect(c).toContain(join(lib, 'libnccl.so.2'));
  });
});

describe.skipIf(hasSystemNccl)('without NCCL', () => {
  it('ncclStatus() says what was tried and how to fix it', () => {
    const s = ncclStatus({});
    expect(s.available).toBe(false);
    if (s.available) return;
    if (native.ok) {
      expect(s.reason).toMatch(/^NCCL \(libnccl\.so\.2\) was not found or is unusable: tried libnccl\.so\.2 \(.*cannot open shared object file.*\)/);
      expect(s.reason).toMatch(/install NCCL \(the libnccl2 package, or pip install nvidia-nccl-cu12, which PyTorch brings\) or set FA_NCCL_LIB/);
    } else {
      expect(s.reason).toMatch(/^NCCL cannot be used: built without CUDA/);
    }
    console.log(`ncclStatus: ${s.reason}`);
  });

  it('createNcclCommunicator() rejects with FAError E_UNSUPPORTED and the reason; the engines stay usable', async () => {
    const fake = { deviceIndex: 0 } as unknown as CudaBackend;
    const e = await createNcclCommunicator(fake, { rank: 0, size: 1, env: {} }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(FAError);
    expect((e as FAError).code).toBe('E_UNSUPPORTED');
    expect((e as FAError).message).toMatch(/^context parallelism over NCCL: NCCL/);
    // nothing else is affected: the registry lists every engine, the CPU engine computes
    const list = await listBackends();
    expect(list.find((b) => b.name === 'cpu')?.available).toBe(true);
    const cpu = await resolveBackend('cpu');
    const x = tensor(new Float32Array(16).fill(0.5), [1, 2, 1, 8], 'f32');
    const r = await cpu.read((await cpu.forward(x, x, x)).out);
    expect(Array.from(r.data as Float32Array).every((v) => Math.abs(v - 0.5) < 1e-6)).toBe(true);
  });

  it('FA_NCCL_LIB pointing nowhere names the path and the loader\'s error', () => {
    const s = ncclStatus({ FA_NCCL_LIB: '/nonexistent/libnccl.so.2' });
    expect(s.available).toBe(false);
    if (!s.available && native.ok) {
      expect(s.reason).toMatch(/tried \/nonexistent\/libnccl\.so\.2 \(.*No such file/);
      expect(s.reason).toMatch(/point FA_NCCL_LIB at libnccl\.so\.2/);
    }
  });
});

describe.skipIf(!native.ok || hasSystemNccl)('libraries that are not a usable NCCL', () => {
  it('a library without the NCCL API is refused, naming what it lacks', () => {
    const s = ncclStatus({ FA_NCCL_LIB: '/lib/x86_64-linux-gnu/libc.so.6' });
    expect(s.available).toBe(false);
    if (!s.available) expect(s.reason).toMatch(/not an NCCL library: it lacks ncclGetVersion/);
  });

  it('a partial NCCL and an NCCL older than 2.7 are refused with the reason', async (ctx) => {
    const partial = buildFakeNccl(22803, true);
    const old = buildFakeNccl(2308);
    if ('reason' in partial || 'reason' in old) {
      ctx.skip(('reason' in partial ? partial.reason : '') + ('reason' in old ? old.reason : ''));
      return;
    }
    const p = ncclStatus({ FA_NCCL_LIB: partial.path });
    expect(!p.available && p.reason).toMatch(/it lacks ncclGetUniqueId, ncclCommInitRank.*ncclSend, ncclRecv/);
    const o = ncclStatus({ FA_NCCL_LIB: old.path });
    expect(!o.available && o.reason).toMatch(/NCCL 2\.3\.8 is older than 2\.7, which added ncclSend\/ncclRecv/);
    const cpu = await createCpuBackend({ threads: 0 });
    expect(cpu.supports).toBeTypeOf('function');
    await cpu.dispose();
  });
});
