/** Where a command writes: stdout lines, and notes for stderr (tests pass their own). */
export interface Io {
  out(line: string): void;
  /** A one-line note that is not the result (e.g. an engine declined and another one ran). */
  note?(line: string): void;
}

export const processIo: Io = {
  out: (line) => {
    process.stdout.write(line + '\n');
  },
  note: (line) => {
    process.stderr.write(`fa: note: ${line}\n`);
  },
};

export function fmtShape(s: readonly number[]): string {
  return `[${s.join(', ')}]`;
}

export function fmtMs(ms: number): string {
  return ms >= 100 ? `${ms.toFixed(0)} ms` : ms >= 10 ? `${ms.toFixed(1)} ms` : `${ms.toFixed(2)} ms`;
}

export function fmtBytes(b: number): string {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) {
    b /= 1024;
    i++;
  }
  return `${b.toFixed(i === 0 ? 0 : 1)} ${u[i]}`;
}
