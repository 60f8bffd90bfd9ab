/** Usage text that fits 80 columns: the flag table with its descriptions wrapped. */
import type { FlagSpec } from './args.js';
import { wrap } from './story/format.js';

export function flagHelp80(spec: FlagSpec, width = 80): string {
  const rows = Object.entries(spec).map(([name, s]) => [`  ${s.short ? `-${s.short}, ` : ''}--${name}${s.type === 'string' ? ' ' + (s.value ?? 'VALUE') : ''}`, s.help]);
  const w = Math.max(...rows.map((r) => r[0].length)) + 2;
  const out: string[] = [];
  for (const [flag, help] of rows) {
    const lines = wrap(help, width - w);
    out.push(flag.padEnd(w) + (lines[0] ?? ''));
    for (const l of lines.slice(1)) out.push(' '.repeat(w) + l);
  }
  return out.join('\n');
}
