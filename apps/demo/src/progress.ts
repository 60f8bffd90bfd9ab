/**
 * Progress on stderr for anything long: a bar with ETA redrawn in place on a terminal, plain
 * lines (every 10 %, at most one per 2 s) otherwise. Never on stdout, so `--json` stays clean.
 */
import { fmtSeconds } from './story/format.js';
import type { Progress, ProgressFn } from './story/run.js';

export interface ProgressBar {
  readonly update: ProgressFn;
  /** Clears the bar (terminal) so the next stdout line starts clean. */
  done(): void;
}

export function progressBar(label: string, stream: NodeJS.WriteStream = process.stderr, width = Math.max(40, Math.min(80, stream.columns || 80))): ProgressBar {
  const tty = stream.isTTY === true;
  let lastLine = -1;
  let lastTime = 0;
  let drawn = false;
  let last: Progress | undefined;
  let timer: ReturnType<typeof setInterval> | undefined;
  let t0 = performance.now();
  const draw = (p: Progress, elapsedNow: number) => {
    const pct = Math.max(0, Math.min(1, p.done));
    const eta = p.estimated ? p.eta : Math.max(0, p.eta - (elapsedNow - p.elapsed));
    const tail = ` ${String(Math.floor(pct * 100)).padStart(3)}%${p.estimated ? ' (est.)' : ''} ${fmtSeconds(elapsedNow)}, ETA ${fmtSeconds(eta)}`;
    const head = `  ${label} `;
    const barW = Math.max(10, width - 1 - head.length - tail.length - 2);
    const fill = Math.round(pct * barW);
    const line = `${head}[${'█'.repeat(fill)}${'░'.repeat(barW - fill)}]${tail}`;
    stream.write(`\r${line.padEnd(width - 1)}`);
    drawn = true;
  };
  const update: ProgressFn = (p) => {
    last = p;
    if (p.elapsed === 0) t0 = performance.now();
    if (tty) {
      draw(p, p.elapsed);
      if (!timer) {
        timer = setInterval(() => last && draw(last, (performance.now() - t0) / 1e3), 250);
        timer.unref?.();
      }
      return;
    }
    const step = Math.floor(p.done * 10);
    const now = performance.now();
    if ((step > lastLine && now - lastTime >= 2000) || (p.done >= 1 && lastLine < 10)) {
      lastLine = p.done >= 1 ? 10 : step;
      lastTime = now;
      stream.write(`  ${label.trim()}: ${Math.floor(p.done * 100)}%${p.estimated ? ' (est.)' : ''} after ${fmtSeconds(p.elapsed)}${p.done >= 1 ? ', done' : `, ETA ${fmtSeconds(p.eta)}`}\n`);
    }
  };
  return {
    update,
    done() {
      if (timer) clearInterval(timer);
      timer = undefined;
      if (tty && drawn) stream.write(`\r${' '.repeat(width - 1)}\r`);
    },
  };
}
