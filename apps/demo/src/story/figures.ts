/**
 * The story's three pictures, from numbers the demo (or the web page) measured: memory against
 * T (model lines and measured dots, with this machine's memory), traffic and arithmetic
 * intensity against T (core's IO model), and throughput per engine.
 */
import { bytesPerElement, type DType } from '@fa/core';
import { barChart, COLORS, lineChart, type HLine, type Series } from './charts.js';
import { fmtBytes, fmtRate, fmtTokens, sig3 } from './format.js';
import { flashExtraModel, ioSeries, naiveMemory, tokenGrid } from './model.js';
import type { MemoryPoint, ThroughputEntry } from './result.js';

export interface MemoryFigure {
  readonly dtype: DType;
  readonly points: readonly MemoryPoint[];
  /** Largest T on the x axis (default 100K). */
  readonly maxT?: number;
  readonly limits?: readonly HLine[];
  /** Tile bytes added to the flash model's line. */
  readonly tileBytes?: number;
}

export function memoryChart(f: MemoryFigure, id = 'chart-memory'): string {
  const measuredTs = f.points.map((p) => p.T);
  const lo = Math.min(256, ...measuredTs);
  const hi = Math.max(f.maxT ?? 100_000, ...measuredTs);
  const grid = tokenGrid(lo, hi);
  const e = bytesPerElement(f.dtype);
  const series: Series[] = [
    { name: `naive: S + P = 2·T²·${e} B (model)`, kind: 'line', color: COLORS.naive, points: grid.map((T) => [T, naiveMemory(T, f.dtype).forward]) },
    { name: f.tileBytes ? 'flash: m, l per row + tiles (model)' : 'flash: at most m, l per row: 8·T B (model)', kind: 'line', color: COLORS.flash, points: grid.map((T) => [T, flashExtraModel(T, f.tileBytes ?? 0).forward]) },
  ];
  const naivePts = f.points.filter((p) => p.naive !== undefined && p.naive > 0).map((p) => [p.T, p.naive!] as const);
  const flashPts = f.points.filter((p) => p.flash !== undefined && p.flash > 0).map((p) => [p.T, p.flash!] as const);
  if (naivePts.length) series.push({ name: 'naive, measured (f32 textbook attention)', kind: 'dots', color: COLORS.naive, points: naivePts });
  if (flashPts.length) series.push({ name: 'flash, measured peak extra', kind: 'dots', color: COLORS.flash, points: flashPts });
  return lineChart({
    id,
    title: 'Extra memory for one head (beyond inputs and outputs)',
    xLabel: 'tokens T',
    yLabel: 'bytes',
    series,
    hlines: f.limits ?? [],
    yFormat: fmtBytes,
  });
}

export function ioChart(D: number, dtype: DType, maxT = 100_000, id = 'chart-io'): string {
  const grid = tokenGrid(256, maxT);
  const fw = ioSeries(grid, D, dtype, 'forward');
  return lineChart({
    id,
    title: `Forward HBM traffic, one head, D = ${D}, ${dtype} (IO model, 192 KiB on-chip)`,
    xLabel: 'tokens T',
    yLabel: 'bytes moved',
    series: [
      { name: 'naive: Θ(T·D + T²)', kind: 'line', color: COLORS.naive, points: fw.map((p) => [p.T, p.naiveBytes]) },
      { name: 'tiled (FA2 order): Θ(T²·D²/M)', kind: 'line', color: COLORS.flash, points: fw.map((p) => [p.T, p.flashBytes]) },
    ],
    yFormat: fmtBytes,
  });
}

export function intensityChart(D: number, dtype: DType, maxT = 100_000, id = 'chart-intensity'): string {
  const grid = tokenGrid(256, maxT);
  const fw = ioSeries(grid, D, dtype, 'forward');
  return lineChart({
    id,
    title: 'Arithmetic intensity of the forward (FLOPs per byte moved)',
    xLabel: 'tokens T',
    yLabel: 'FLOP / byte',
    series: [
      { name: 'naive', kind: 'line', color: COLORS.naive, points: fw.map((p) => [p.T, p.naiveIntensity]) },
      { name: 'tiled (FA2 order)', kind: 'line', color: COLORS.flash, points: fw.map((p) => [p.T, p.flashIntensity]) },
    ],
    yFormat: (y) => sig3(y),
  });
}

export function throughputChart(entries: readonly ThroughputEntry[], id = 'chart-throughput'): string {
  return barChart({
    id,
    title: 'Throughput per engine (one head)',
    xLabel: 'FLOP/s',
    groups: ['forward', 'backward'],
    bars: entries.map((e) => ({ label: `${e.backend}, T = ${fmtTokens(e.T)}`, detail: e.device, values: [e.forwardRate, e.backwardRate] })),
    format: fmtRate,
  });
}
