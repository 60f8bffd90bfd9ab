// Zero-copy interop with another CUDA addon (issue 24), on a GPU: the peer test addon
// (test/peer/peer.cu) owns memory and a stream; our backend wraps its pointers, runs on its
// stream, and hands its own pointers back. Shared by test/interop.test.ts and the device script
// bench/interop-device.mjs. Each check returns { name, pass, message }.
import { FAError, naiveBackward, tensor } from '@fa/core';

function randn(n, seed) {
  let s = seed >>> 0 || 1;
  const u = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return (s + 0.5) / 4294967296; };
  return Float32Array.from({ length: n }, () => Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u()));
}

function relErr(x, ref) {
  let num = 0, den = 0;
  for (let i = 0; i < ref.length; i++) { num += (x[i] - ref[i]) ** 2; den += ref[i] ** 2; }
  return Math.sqrt(num / Math.max(den, 1e-300));
}

async function refused(p, re) {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    if (!(e instanceof FAError)) return `threw a ${e?.constructor?.name}, not an FAError: ${e?.message}`;
    if (!re.test(`${e.code}: ${e.message}`)) return `wrong error: ${e.code}: ${e.message}`;
    return null;
  }
  return 'no error';
}

/**
 * Runs the checks; `peer` is the loaded peer addon, `createCudaBackend` @fa/cuda's; `onResult`
 * sees each result as it comes. Returns [{ name, pass, message }]. (A stream handle that is not a
 * live cudaStream_t cannot be checked: the CUDA runtime dereferences it. Not tried here.)
 */
export async function interopChecks(peer, createCudaBackend, onResult = () => undefined) {
  const results = [];
  const check = async (name, f) => {
    let r;
    try {
      const m = await f();
      r = { name, pass: true, message: m ?? 'ok' };
    } catch (e) {
      r = { name, pass: false, message: e?.message ?? String(e) };
    }
    results.push(r);
    onResult(r);
  };
  const must = (ok, what) => { if (!ok) throw new Error(what); };
  const shape = [2, 64, 4, 32];
  const n = shape.reduce((a, b) => a * b);
  const vals = [randn(n, 1), randn(n, 2), randn(n, 3), randn(n, 4)];
  const opts = { causal: true };

  await check("forward and backward on the peer's memory, outputs read back through the peer", async () => {
    const be = await createCudaBackend();
    const ptrs = vals.map((v) => { const p = peer.alloc(v.byteLength); peer.write(p, v); return p; });
    const [q, k, v, dO] = ptrs.map((p) => be.wrapPointer(p, { dtype: 'f32', shape }));
    const f = await be.forward(q, k, v, opts);
    const g = await be.backward(q, k, v, f.out, dO, f.lse, opts);
    const ref = naiveBackward(tensor(vals[0], shape), tensor(vals[1], shape), tensor(vals[2], shape), tensor(vals[3], shape), opts);
    const viaPeer = (t) => { const e = be.exportPointer(t); const a = new Float32Array(e.bytes / 4); peer.read(e.address, a); return a; };
    await be.synchronize();
    const errs = { out: relErr(viaPeer(f.out), ref.out), dq: relErr(viaPeer(g.dq), ref.dq), dk: relErr(viaPeer(g.dk), ref.dk), dv: relErr(viaPeer(g.dv), ref.dv) };
    for (const [k2, e] of Object.entries(errs)) must(e < 2e-5, `${k2} differs from the float64 reference by ${e}`);
    // the same call on uploads: the same bits
    const u = await be.forward(await be.upload(tensor(vals[0], shape)), await be.upload(tensor(vals[1], shape)), await be.upload(tensor(vals[2], shape)), opts);
    const a = (await be.read(u.out)).data, b = (await be.read(f.out)).data;
    must(a.every((x, i) => x === b[i]), 'wrapped and uploaded inputs gave different bits');
    // disposing wrapped tensors never frees the peer's memory
    for (const t of [q, k, v, dO]) be.disposeTensor(t);
    const back = new Float32Array(n);
    peer.read(ptrs[1], back);
    must(back.every((x, i) => x === vals[1][i]), "the peer's memory changed");
    await be.dispose();
    ptrs.forEach((p) => peer.free(p));
    return `ok: rel. L2 to float64 out ${errs.out.toExponential(1)}, dq ${errs.dq.toExponential(1)}, dk ${errs.dk.toExponential(1)}, dv ${errs.dv.toExponential(1)}`;
  });

  await check("on the peer's stream: our call queues behind the peer's kernel without a sync, and the peer's kernel runs on our output", async () => {
    const s = peer.stream();
    const be = await createCudaBackend({ stream: s });
    must(be.streamHandle === s, 'streamHandle is not the given stream');
    const pq = peer.alloc(n * 4);
    peer.write(pq, new Float32Array(n)); // zeros now
    const q = be.wrapPointer(pq, { dtype: 'f32', shape });
    const k = await be.upload(tensor(vals[1], shape)), v = await be.upload(tensor(vals[2], shape));
    // the peer fills q with 0.5 after spinning 50 ms on the GPU; our stream call is issued at once
    // and only read() waits: it sees the peer's values because both run on one stream
    peer.fillAfter(pq, n, 0.5, s, 50);
    const f = be.stream.forward(q, k, v, opts);
    const got = (await be.read(f.out)).data;
    const ref = naiveBackward(tensor(new Float32Array(n).fill(0.5), shape), tensor(vals[1], shape), tensor(vals[2], shape), tensor(vals[3], shape), opts).out;
    const err = relErr(got, ref);
    must(err < 2e-5, `out differs from the reference for q = 0.5 by ${err}: our call did not wait for the peer's kernel`);
    // the other way: once our call settled, the peer's kernel on the same stream works on our output in place
    const g = await be.forward(q, k, v, opts);
    const e = be.exportPointer(g.out);
    must(e.stream === s && e.bytes === n * 4, 'exportPointer names another stream or size');
    peer.scale(e.address, n, 2, s);
    const twice = (await be.read(g.out)).data;
    must(twice.every((x, i) => x === 2 * got[i]), "the peer's kernel did not run on our output before our read");
    await be.dispose();
    peer.syncStream(s);
    peer.destroyStream(s);
    peer.free(pq);
    return `ok: rel. L2 ${err.toExponential(1)}`;
  });

  await check("KV caches in the peer's memory are appended in place", async () => {
    const be = await createCudaBackend();
    const [B, cap, Hkv, D, H] = [2, 16, 2, 32, 4];
    const nc = B * cap * Hkv * D;
    const kc0 = randn(nc, 7), vc0 = randn(nc, 8);
    const pk = peer.alloc(nc * 4), pv = peer.alloc(nc * 4);
    peer.write(pk, kc0);
    peer.write(pv, vc0);
    const kc = be.wrapPointer(pk, { dtype: 'f32', shape: [B, cap, Hkv, D] }), vc = be.wrapPointer(pv, { dtype: 'f32', shape: [B, cap, Hkv, D] });
    const qh = tensor(randn(B * H * D, 9), [B, 1, H, D]);
    const kn = tensor(randn(B * Hkv * D, 10), [B, 1, Hkv, D]), vn = tensor(randn(B * Hkv * D, 11), [B, 1, Hkv, D]);
    const lens = Int32Array.from([5, 9]);
    const r = await be.forwardWithKVCache(await be.upload(qh), kc, vc, { cacheSeqlens: lens, kNew: await be.upload(kn), vNew: await be.upload(vn), causal: true });
    const hk = tensor(Float32Array.from(kc0), [B, cap, Hkv, D]), hv = tensor(Float32Array.from(vc0), [B, cap, Hkv, D]);
    const h = await be.forwardWithKVCache(qh, hk, hv, { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true });
    const a = (await be.read(r.out)).data;
    must(a.every((x, i) => x === h.out.data[i]), 'wrapped caches gave other results than host caches');
    await be.synchronize();
    const pk2 = new Float32Array(nc);
    peer.read(pk, pk2);
    must(pk2.every((x, i) => x === hk.data[i]), "the peer's K cache does not hold the appended rows");
    await be.dispose();
    peer.free(pk);
    peer.free(pv);
  });

  await check('wrong pointers and streams are one-line FAErrors, and the backend runs on after', async () => {
    const be = await createCudaBackend();
    const p = peer.alloc(4096);
    const bad = [
      [() => be.wrapPointer(p + 16n, { dtype: 'f32', shape: [4] }), /^E_ARG: wrapPointer: address 0x[0-9a-f]+ is not a multiple of 256 bytes/],
      [() => be.wrapPointer(p, { dtype: 'f32', shape: [1 << 20] }), /^E_SHAPE: cuda: wrap: 4194304 bytes from the address run past its allocation/],
      [() => be.wrapPointer(256n * 99991n, { dtype: 'f32', shape: [4] }), /^E_ARG: cuda: wrap: the address is not CUDA memory/],
      [() => be.wrapPointer(Number(p), { dtype: 'f32', shape: [4] }), /^E_ARG: wrapPointer: address must be a bigint/],
    ];
    const msgs = [];
    for (const [f, re] of bad) { const m = await refused(f, re); if (m) msgs.push(m); }
    must(msgs.length === 0, msgs.join('; '));
    const freed = peer.alloc(4096);
    peer.free(freed);
    const m = await refused(() => be.wrapPointer(freed, { dtype: 'f32', shape: [4] }), /^E_ARG: cuda: wrap: /);
    // (a freed address may be handed out again by the driver's pool; then wrapping it is valid)
    const t = be.wrapPointer(p, { dtype: 'f32', shape: [32, 1, 1, 32] });
    const f = await be.forward(t, t, t);
    must((await be.read(f.out)).data.length === 1024, 'the backend did not run after the refusals');
    await be.dispose();
    peer.free(p);
    return m ? `ok (a freed address: ${m})` : 'ok (a freed address refused too)';
  });
  return results;
}
