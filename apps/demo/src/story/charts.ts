/**
 * Hand-written SVG charts (strings, no DOM, no library): used by the HTML report that
 * `fa demo --report` writes and by the web page. Log axes with decade ticks, lines for models,
 * dots for measurements, dashed horizontal lines for limits (this machine's memory).
 */
import { fmtBytes, fmtRate, fmtTokens, sig3 } from './format.js';

export const COLORS = { naive: '#c0392b', flash: '#1f6fb2', other: '#6c757d', third: '#2e8b57', fourth: '#8e44ad' } as const;

export interface Series {
  readonly name: string;
  readonly points: readonly (readonly [number, number])[];
  /** 'line' (a model) or 'dots' (measurements). */
  readonly kind: 'line' | 'dots';
  readonly color: string;
  readonly dashed?: boolean;
}

export interface HLine {
  readonly y: number;
  readonly label: string;
  readonly color?: string;
}

export interface LineChartOptions {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
  readonly hlines?: readonly HLine[];
  readonly xFormat?: (x: number) => string;
  readonly yFormat?: (y: number) => string;
  readonly width?: number;
  readonly height?: number;
  /** An id for the <svg> element (tests and the page look charts up by it). */
  readonly id?: string;
}

export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

const n2 = (x: number) => (Math.round(x * 10) / 10).toString();

interface LogAxis {
  lo: number;
  hi: number;
  map: (v: number, a: number, b: number) => number;
  ticks: number[];
}

function logAxis(values: readonly number[]): LogAxis {
  const pos = values.filter((v) => v > 0 && Number.isFinite(v));
  let lo = pos.length ? Math.min(...pos) : 1;
  let hi = pos.length ? Math.max(...pos) : 10;
  let e0 = Math.floor(Math.log10(lo));
  let e1 = Math.ceil(Math.log10(hi));
  if (e1 === e0) e1 = e0 + 1;
  lo = 10 ** e0;
  hi = 10 ** e1;
  // at most ~8 labelled ticks: every k-th decade
  const span = e1 - e0;
  const step = Math.max(1, Math.ceil(span / 8));
  e0 = Math.floor(e0 / step) * step;
  lo = 10 ** e0;
  const ticks: number[] = [];
  for (let e = e0; e <= e1; e += step) ticks.push(10 ** e);
  const l0 = Math.log10(lo);
  const l1 = Math.log10(hi);
  return { lo, hi, ticks, map: (v, a, b) => a + ((Math.log10(v) - l0) / (l1 - l0)) * (b - a) };
}

/** A log–log line chart as an <svg> string. */
export function lineChart(o: LineChartOptions): string {
  const W = o.width ?? 640;
  const H = o.height ?? 360;
  const m = { l: 78, r: 16, t: 40, b: 48 };
  const xs = o.series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = [...o.series.flatMap((s) => s.points.map((p) => p[1])), ...(o.hlines ?? []).map((h) => h.y)];
  const ax = logAxis(xs);
  const ay = logAxis(ys);
  const X = (v: number) => ax.map(v, m.l, W - m.r);
  const Y = (v: number) => ay.map(v, H - m.b, m.t);
  const xf = o.xFormat ?? ((x: number) => fmtTokens(x));
  const yf = o.yFormat ?? ((y: number) => sig3(y));
  const parts: string[] = [];
  parts.push(`<svg class="fa-chart" ${o.id ? `id="${esc(o.id)}" ` : ''}viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(o.title)}" font-family="system-ui, sans-serif" font-size="12">`);
  parts.push(`<title>${esc(o.title)}</title>`);
  parts.push(`<rect x="0" y="0" width="${W}" height="${H}" fill="#fff"/>`);
  parts.push(`<text x="${m.l}" y="20" font-size="14" font-weight="600">${esc(o.title)}</text>`);
  // grid and ticks
  for (const t of ax.ticks) {
    const x = n2(X(t));
    parts.push(`<line x1="${x}" y1="${m.t}" x2="${x}" y2="${H - m.b}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${x}" y="${H - m.b + 16}" text-anchor="middle" fill="#444">${esc(xf(t))}</text>`);
  }
  for (const t of ay.ticks) {
    const y = n2(Y(t));
    parts.push(`<line x1="${m.l}" y1="${y}" x2="${W - m.r}" y2="${y}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${m.l - 6}" y="${y}" dy="4" text-anchor="end" fill="#444">${esc(yf(t))}</text>`);
  }
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${W - m.l - m.r}" height="${H - m.t - m.b}" fill="none" stroke="#999"/>`);
  parts.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - 10}" text-anchor="middle" fill="#222">${esc(o.xLabel)}</text>`);
  parts.push(`<text transform="translate(14 ${(m.t + H - m.b) / 2}) rotate(-90)" text-anchor="middle" fill="#222">${esc(o.yLabel)}</text>`);
  // limits
  for (const h of o.hlines ?? []) {
    if (!(h.y > 0)) continue;
    const y = n2(Y(h.y));
    const c = h.color ?? COLORS.other;
    parts.push(`<line class="hline" x1="${m.l}" y1="${y}" x2="${W - m.r}" y2="${y}" stroke="${c}" stroke-dasharray="6 4"/>`);
    parts.push(`<text x="${W - m.r - 4}" y="${y}" dy="-4" text-anchor="end" fill="${c}">${esc(h.label)}</text>`);
  }
  // series
  for (const s of o.series) {
    const pts = s.points.filter((p) => p[0] > 0 && p[1] > 0);
    if (s.kind === 'line' && pts.length > 1) {
      parts.push(`<polyline class="series" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="4 3"' : ''} points="${pts.map((p) => `${n2(X(p[0]))},${n2(Y(p[1]))}`).join(' ')}"><title>${esc(s.name)}</title></polyline>`);
    } else {
      for (const p of pts) {
        parts.push(`<circle class="point" cx="${n2(X(p[0]))}" cy="${n2(Y(p[1]))}" r="4.5" fill="${s.color}" stroke="#fff"><title>${esc(`${s.name}: ${xf(p[0])}, ${yf(p[1])}`)}</title></circle>`);
      }
    }
  }
  // legend
  let ly = m.t + 14;
  for (const s of o.series) {
    const lx = m.l + 10;
    if (s.kind === 'line') parts.push(`<line x1="${lx}" y1="${ly - 4}" x2="${lx + 22}" y2="${ly - 4}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="4 3"' : ''}/>`);
    else parts.push(`<circle cx="${lx + 11}" cy="${ly - 4}" r="4.5" fill="${s.color}"/>`);
    parts.push(`<text x="${lx + 28}" y="${ly}" fill="#222">${esc(s.name)}</text>`);
    ly += 16;
  }
  parts.push('</svg>');
  return parts.join('');
}

export interface Bar {
  readonly label: string;
  /** A second, smaller line under the label (e.g. the device). */
  readonly detail?: string;
  readonly values: readonly number[];
}

export interface BarChartOptions {
  readonly title: string;
  readonly xLabel: string;
  /** Names of the values of each bar group (e.g. forward, backward). */
  readonly groups: readonly string[];
  readonly bars: readonly Bar[];
  readonly format?: (v: number) => string;
  readonly width?: number;
  readonly id?: string;
}

/** Horizontal grouped bars; a log axis when the values span more than two decades. */
export function barChart(o: BarChartOptions): string {
  const W = o.width ?? 640;
  const groupColors = [COLORS.flash, COLORS.third, COLORS.fourth, COLORS.naive];
  const barH = 16;
  const m = { l: 180, r: 90, t: 40 + 16 * o.groups.length, b: 40 };
  const H = m.t + m.b + o.bars.length * (o.groups.length * (barH + 2) + 12);
  const vals = o.bars.flatMap((b) => b.values).filter((v) => v > 0 && Number.isFinite(v));
  const fmt = o.format ?? ((v: number) => fmtRate(v));
  const useLog = vals.length > 0 && Math.max(...vals) / Math.min(...vals) > 100;
  const hiLin = vals.length ? Math.max(...vals) : 1;
  const ax = logAxis(vals.length ? vals.map((v) => v) : [1, 10]);
  const X = (v: number) => (useLog ? ax.map(Math.max(v, ax.lo), m.l, W - m.r) : m.l + (v / (hiLin * 1.05)) * (W - m.l - m.r));
  const parts: string[] = [];
  parts.push(`<svg class="fa-chart" ${o.id ? `id="${esc(o.id)}" ` : ''}viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(o.title)}" font-family="system-ui, sans-serif" font-size="12">`);
  parts.push(`<title>${esc(o.title)}</title>`);
  parts.push(`<rect x="0" y="0" width="${W}" height="${H}" fill="#fff"/>`);
  parts.push(`<text x="12" y="20" font-size="14" font-weight="600">${esc(o.title)}</text>`);
  o.groups.forEach((g, i) => {
    const y = 38 + 16 * i;
    parts.push(`<rect x="12" y="${y - 10}" width="14" height="10" fill="${groupColors[i % groupColors.length]}"/><text x="32" y="${y}" fill="#222">${esc(g)}</text>`);
  });
  if (useLog) {
    for (const t of ax.ticks) {
      const x = n2(X(t));
      parts.push(`<line x1="${x}" y1="${m.t}" x2="${x}" y2="${H - m.b}" stroke="#e5e5e5"/><text x="${x}" y="${H - m.b + 14}" text-anchor="middle" fill="#444">${esc(fmt(t))}</text>`);
    }
  }
  let y = m.t;
  for (const b of o.bars) {
    const mid = y + (o.groups.length * (barH + 2)) / 2;
    const clip = (s: string) => ([...s].length > 28 ? [...s].slice(0, 27).join('') + '…' : s);
    parts.push(`<text x="${m.l - 8}" y="${b.detail ? mid - 2 : mid + 4}" text-anchor="end" fill="#222">${esc(clip(b.label))}</text>`);
    if (b.detail) parts.push(`<text x="${m.l - 8}" y="${mid + 11}" text-anchor="end" fill="#666" font-size="10">${esc(clip(b.detail))}</text>`);
    b.values.forEach((v, i) => {
      const w = v > 0 && Number.isFinite(v) ? Math.max(1, X(v) - m.l) : 0;
      parts.push(`<rect class="bar" x="${m.l}" y="${y}" width="${n2(w)}" height="${barH}" fill="${groupColors[i % groupColors.length]}"><title>${esc(`${b.label} ${o.groups[i] ?? ''}: ${fmt(v)}`)}</title></rect>`);
      parts.push(`<text x="${n2(m.l + w + 4)}" y="${y + barH - 4}" fill="#222">${esc(v > 0 ? fmt(v) : 'n/a')}</text>`);
      y += barH + 2;
    });
    y += 12;
  }
  parts.push(`<line x1="${m.l}" y1="${m.t - 4}" x2="${m.l}" y2="${H - m.b}" stroke="#999"/>`);
  parts.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - 10}" text-anchor="middle" fill="#222">${esc(o.xLabel)}${useLog ? ' (log scale)' : ''}</text>`);
  parts.push('</svg>');
  return parts.join('');
}

export const bytesFormat = (b: number): string => fmtBytes(b);
