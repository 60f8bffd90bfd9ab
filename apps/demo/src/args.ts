/**
 * Flag parsing on node:util parseArgs, with messages a person can act on: unknown flags, flags
 * missing their value, values that are not numbers. Values may start with '-' (`--scale -0.5`,
 * `--window -1,0`).
 */
import { parseArgs } from 'node:util';
import { argError } from './errors.js';

export type FlagSpec = Record<string, { type: 'string' | 'boolean'; short?: string; help: string; value?: string }>;

export interface Parsed {
  strings: Map<string, string>;
  booleans: Set<string>;
}

/** Parses `args` for command `cmd` (for messages). Every error is E_ARG. */
export function parseFlags(cmd: string, args: readonly string[], spec: FlagSpec): Parsed {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const [name, s] of Object.entries(spec)) options[name] = s.short ? { type: s.type, short: s.short } : { type: s.type };
  const { tokens } = parseArgs({ args: [...args], options, strict: false, allowPositionals: true, tokens: true });
  const strings = new Map<string, string>();
  const booleans = new Set<string>();
  const seen = new Set<string>();
  for (let ti = 0; ti < tokens.length; ti++) {
    const t = tokens[ti];
    if (t.kind === 'option-terminator') continue;
    if (t.kind === 'positional') throw argError(`unexpected argument ${JSON.stringify(t.value)} for "fa ${cmd}" (flags take the form --name value; see fa ${cmd} --help)`);
    const s = spec[t.name];
    if (!s) throw argError(`unknown option ${t.rawName} for "fa ${cmd}" (see fa ${cmd} --help)`);
    if (seen.has(t.name)) throw argError(`option --${t.name} is given more than once`);
    seen.add(t.name);
    if (s.type === 'boolean') {
      if (t.value !== undefined) throw argError(`option --${t.name} takes no value (got ${JSON.stringify(t.value)})`);
      booleans.add(t.name);
    } else {
      // parseArgs (non-strict) takes the next argument as the value even if it is another flag:
      // treat "--q --k" as --q missing its value.
      if (t.value === undefined || (!t.inlineValue && t.value.startsWith('--') && t.value.slice(2).split('=')[0] in spec)) {
        throw argError(`option --${t.name} needs a value: --${t.name} ${s.value ?? 'VALUE'}`);
      }
      if (t.value === '') throw argError(`option --${t.name} has an empty value`);
      strings.set(t.name, t.value);
    }
  }
  return { strings, booleans };
}

export function requireFlag(p: Parsed, name: string, cmd: string, value = 'VALUE'): string {
  const v = p.strings.get(name);
  if (v === undefined) throw argError(`missing required option --${name} ${value} for "fa ${cmd}" (see fa ${cmd} --help)`);
  return v;
}

const NUMBER = /^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?(?:Infinity|inf)$|^nan$|^NaN$/i;

/** A decimal number (also inf/Infinity/nan, which the library then judges). */
export function parseNumber(name: string, s: string): number {
  const t = s.trim();
  if (!NUMBER.test(t)) throw argError(`--${name} expects a number, got ${JSON.stringify(s)}`);
  if (/nan/i.test(t)) return NaN;
  if (/inf/i.test(t)) return t.startsWith('-') ? -Infinity : Infinity;
  return Number(t);
}

/** A positive integer flag value. */
export function parseCount(name: string, s: string, min = 1): number {
  const t = s.trim();
  if (!/^\d+$/.test(t) || !Number.isSafeInteger(Number(t)) || Number(t) < min) throw argError(`--${name} expects an integer >= ${min}, got ${JSON.stringify(s)}`);
  return Number(t);
}

/** A comma-separated list of positive integers. */
export function parseCounts(name: string, s: string): number[] {
  return s.split(',').map((x) => parseCount(name, x));
}

/** "L,R" → [L, R] integers (-1 = unbounded); the library checks the range. */
export function parseWindow(s: string): [number, number] {
  const m = /^\s*([-+]?\d+)\s*,\s*([-+]?\d+)\s*$/.exec(s);
  if (!m) throw argError(`--window expects two integers L,R (-1 = unbounded), e.g. --window 128,0; got ${JSON.stringify(s)}`);
  return [Number(m[1]), Number(m[2])];
}

/** Usage text of a command's flags. */
export function flagHelp(spec: FlagSpec): string {
  const rows = Object.entries(spec).map(([name, s]) => [`  ${s.short ? `-${s.short}, ` : ''}--${name}${s.type === 'string' ? ' ' + (s.value ?? 'VALUE') : ''}`, s.help]);
  const w = Math.max(...rows.map((r) => r[0].length)) + 2;
  return rows.map(([a, b]) => a.padEnd(w) + b).join('\n');
}
