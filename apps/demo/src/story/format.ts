/**
 * Number formatting for the demo story, shared by the terminal, the HTML report and the web
 * page. Bytes are decimal (kB, MB, GB: 1 GB = 10⁹ B), as in "20 GB in bf16".
 */

/** 1234567 → "1,234,567". */
export function fmtInt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const s = Math.round(Math.abs(n)).toString();
  return (n < 0 ? '-' : '') + s.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** Three significant digits, no exponent for ordinary sizes: 3.14, 31.4, 314. */
export function sig3(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a === 0) return '0';
  if (a >= 100) return x.toFixed(0);
  if (a >= 10) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  return x.toPrecision(3);
}

/** Decimal bytes: "20.0 GB", "512 kB", "0 B". */
export function fmtBytes(b: number): string {
  if (!Number.isFinite(b)) return String(b);
  const u = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let i = 0;
  let x = Math.abs(b);
  while (x >= 1000 && i < u.length - 1) {
    x /= 1000;
    i++;
  }
  const s = i === 0 ? x.toFixed(0) : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
  return `${b < 0 ? '-' : ''}${s} ${u[i]}`;
}

/** Seconds: "850 µs", "12.3 ms", "4.20 s", "3 min 05 s", "1 h 02 min". */
export function fmtSeconds(s: number): string {
  if (!Number.isFinite(s)) return String(s);
  if (s < 1e-3) return `${(s * 1e6).toFixed(0)} µs`;
  if (s < 1) return `${sig3(s * 1e3)} ms`;
  if (s < 100) return `${sig3(s)} s`;
  if (s < 3600) {
    const m = Math.floor(s / 60);
    return `${m} min ${String(Math.round(s - 60 * m)).padStart(2, '0')} s`;
  }
  const h = Math.floor(s / 3600);
  return `${h} h ${String(Math.round((s - 3600 * h) / 60)).padStart(2, '0')} min`;
}

/** FLOP/s: "812 MFLOP/s", "1.23 GFLOP/s", "310 TFLOP/s". */
export function fmtRate(flopsPerSecond: number): string {
  if (!Number.isFinite(flopsPerSecond) || flopsPerSecond <= 0) return '-';
  const u = ['FLOP/s', 'kFLOP/s', 'MFLOP/s', 'GFLOP/s', 'TFLOP/s', 'PFLOP/s'];
  let i = 0;
  let x = flopsPerSecond;
  while (x >= 1000 && i < u.length - 1) {
    x /= 1000;
    i++;
  }
  return `${sig3(x)} ${u[i]}`;
}

/** FLOPs: "2.56 TFLOP". */
export function fmtFlops(f: number): string {
  return fmtRate(f).replace('/s', '');
}

/** An error value: "3.2e-8", "0". */
export function fmtErr(x: number): string {
  if (x === 0) return '0';
  if (!Number.isFinite(x)) return String(x);
  return x.toExponential(1).replace('e-', 'e-').replace('e+', 'e');
}

/** A ratio: "3.4×", "1,250×". */
export function fmtRatio(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  return x >= 1000 ? `${fmtInt(x)}×` : `${sig3(x)}×`;
}

/** Short token counts for axes and labels: 100000 → "100K", 6144 → "6,144", 1048576 → "1.05M". */
export function fmtTokens(t: number): string {
  if (t >= 1e6) return `${sig3(t / 1e6)}M`;
  if (t >= 1e4 && t % 1000 === 0) return `${t / 1000}K`;
  return fmtInt(t);
}

/**
 * Splits text into lines of at most `width` characters at ordinary spaces (words longer stay
 * whole; a no-break space U+00A0 keeps its neighbours together).
 */
export function wrap(text: string, width: number, indent = ''): string[] {
  const words = text.split(/[ \t\n\r]+/).filter((w) => w.length > 0);
  const lines: string[] = [];
  let cur = '';
  for (const w of words) {
    if (cur.length === 0) cur = indent + w;
    else if (cur.length + 1 + w.length <= width) cur += ' ' + w;
    else {
      lines.push(cur);
      cur = indent + w;
    }
  }
  if (cur.length > 0) lines.push(cur);
  return lines;
}
