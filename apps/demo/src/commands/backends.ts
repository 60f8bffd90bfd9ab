/** `fa backends`: one line per engine: name, device, and "available" or why not. */
import { listBackends } from '@fa/core';
import { parseFlags, flagHelp, type FlagSpec } from '../args.js';
import { loadOptionalEngines } from '../engines.js';
import type { Io } from '../io.js';

const SPEC: FlagSpec = { help: { type: 'boolean', short: 'h', help: 'show this help' } };

export const backendsHelp = `usage: fa backends

Lists every engine: its name, its device, and "available" or the reason it is not.
@fa/core's cpu engine is always present; @fa/webgpu and @fa/cuda are listed when installed.

${flagHelp(SPEC)}`;

export async function backendsCommand(args: readonly string[], io: Io): Promise<number> {
  const p = parseFlags('backends', args, SPEC);
  if (p.booleans.has('help')) {
    io.out(backendsHelp);
    return 0;
  }
  const engines = await loadOptionalEngines();
  const rows: [string, string, string][] = [];
  const listed = await listBackends();
  for (const b of listed) rows.push([b.name, b.device ?? '-', b.available ? 'available' : `unavailable: ${b.reason ?? 'unknown reason'}`]);
  for (const e of engines) {
    if (listed.some((b) => b.name === e.name)) continue;
    rows.push([e.name, '-', `unavailable: ${e.failure ?? `${e.pkg} loaded but registered no backend named ${e.name}`}`]);
  }
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  for (const [n, d, s] of rows) io.out(`${n.padEnd(w0)}  ${d.padEnd(w1)}  ${s.replace(/\s*\n\s*/g, ' ')}`);
  return 0;
}
