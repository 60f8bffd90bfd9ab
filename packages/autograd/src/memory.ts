/**
 * What the recorded graph holds for backward. Walks every node reachable from the given
 * tensors and adds up the buffers they saved, counting each underlying buffer once (a reshape
 * shares its input's buffer; two linears reading the same activation save it once).
 */
import type { Node, Saved } from './node.js';
import type { Tensor } from './tensor.js';

export interface OpMemory {
  /** Recorded nodes of this op. */
  readonly nodes: number;
  /** Bytes of activations first saved by this op (each buffer counted once, in the first op that saved it). */
  readonly bytes: number;
  /** Bytes per saved role ("q", "lse", "x", …) of this op. */
  readonly byWhat: Readonly<Record<string, number>>;
}

export interface MemoryReport {
  /** Bytes of buffers held for backward that no leaf owns (activations, statistics, lse). */
  readonly bytes: number;
  /** Bytes of saved leaf buffers (parameters, inputs): referenced, but alive anyway. */
  readonly leafBytes: number;
  /** Activation bytes attributed per op name. */
  readonly byOp: Readonly<Record<string, OpMemory>>;
  /** Recorded nodes reachable (and not yet released). */
  readonly nodes: number;
}

function reachable(roots: readonly Tensor[]): Node[] {
  const out: Node[] = [];
  const seen = new Set<Node>();
  const stack: Node[] = [];
  for (const r of roots) if (r.gradFn && !seen.has(r.gradFn)) (seen.add(r.gradFn), stack.push(r.gradFn));
  while (stack.length > 0) {
    const n = stack.pop()!;
    out.push(n);
    for (const e of n.next) {
      if (e !== null && 'node' in e && !seen.has(e.node)) {
        seen.add(e.node);
        stack.push(e.node);
      }
    }
  }
  // Report in creation order so "first saved by" means the earliest op in the forward pass.
  return out.sort((a, b) => a.id - b.id);
}

/**
 * Identity of a saved view: two saves of the same bytes (a reshape shares its input's array)
 * count once. Views are counted by their own length, not their whole underlying buffer.
 */
const viewKeys = new WeakMap<ArrayBufferLike, Map<string, object>>();
function keyOf(s: Saved): object {
  const buf = s.data.buffer;
  let m = viewKeys.get(buf);
  if (!m) viewKeys.set(buf, (m = new Map()));
  const k = `${s.data.byteOffset}:${s.data.byteLength}`;
  let key = m.get(k);
  if (!key) m.set(k, (key = {}));
  return key;
}

/** The graph's saved buffers, reachable from `roots`, by op. */
export function memoryReport(...roots: Tensor[]): MemoryReport {
  const counted = new Set<object>();
  const leafCounted = new Set<object>();
  const byOp: Record<string, { nodes: number; bytes: number; byWhat: Record<string, number> }> = {};
  let bytes = 0;
  let leafBytes = 0;
  const nodes = reachable(roots).filter((n) => !n.released);
  for (const n of nodes) {
    const op = (byOp[n.name] ??= { nodes: 0, bytes: 0, byWhat: {} });
    op.nodes++;
    for (const s of n.saved) {
      const key = keyOf(s);
      const n = s.data.byteLength;
      if (s.leaf) {
        if (!leafCounted.has(key)) {
          leafCounted.add(key);
          leafBytes += n;
        }
        continue;
      }
      if (counted.has(key)) continue;
      counted.add(key);
      bytes += n;
      op.bytes += n;
      op.byWhat[s.what] = (op.byWhat[s.what] ?? 0) + n;
    }
  }
  return { bytes, leafBytes, byOp, nodes: nodes.length };
}

/** Bytes of activations the graph behind `roots` holds for backward (leaves excluded). */
export function savedBytes(...roots: Tensor[]): number {
  return memoryReport(...roots).bytes;
}

/** A small table of a report, one line per op, for logs. */
export function formatMemoryReport(r: MemoryReport): string {
  const mib = formatBytes;
  const lines = [`held for backward: ${mib(r.bytes)} in ${r.nodes} nodes (+ ${mib(r.leafBytes)} of leaves referenced)`];
  const ops = Object.entries(r.byOp).sort((a, b) => b[1].bytes - a[1].bytes);
  for (const [name, m] of ops) {
    const parts = Object.entries(m.byWhat).map(([w, b]) => `${w} ${mib(b)}`).join(', ');
    lines.push(`  ${name.padEnd(14)} ×${String(m.nodes).padEnd(4)} ${mib(m.bytes).padStart(12)}${parts ? `  (${parts})` : ''}`);
  }
  return lines.join('\n');
}

/** 1536 → "1.50 KiB". */
export function formatBytes(b: number): string {
  if (b < 1024) return `${b} B`;
  if (b < 2 ** 20) return `${(b / 1024).toFixed(2)} KiB`;
  if (b < 2 ** 30) return `${(b / 2 ** 20).toFixed(2)} MiB`;
  return `${(b / 2 ** 30).toFixed(2)} GiB`;
}
