#!/usr/bin/env node
/**
 * The `fa` command (DESIGN.md, "The `fa` command"): backends, run, demo, bench.
 * Any failure prints exactly one line `fa: E_CODE: message` on stderr and exits with status 1.
 */
import { resetBackends } from '@fa/core';
import { backendsCommand, backendsHelp } from './commands/backends.js';
import { benchCommand, benchHelp } from './commands/bench.js';
import { demoCommand, demoHelp } from './commands/demo.js';
import { runCommand, runHelp } from './commands/run.js';
import { argError, formatError } from './errors.js';
import { processIo, type Io } from './io.js';

type Command = (args: readonly string[], io: Io) => Promise<number>;

const COMMANDS: Record<string, { run: Command; help: string; summary: string }> = {
  backends: { run: backendsCommand, help: backendsHelp, summary: 'list the engines and whether each is available' },
  run: { run: runCommand, help: runHelp, summary: 'attention on .npy inputs, results as .npy files' },
  demo: { run: demoCommand, help: demoHelp, summary: 'the 100K-token story: memory, exactness, traffic, online softmax' },
  bench: { run: benchCommand, help: benchHelp, summary: 'throughput and memory tables for any engine' },
};

const usage = `usage: fa <command> [options]

commands:
${Object.entries(COMMANDS)
  .map(([n, c]) => `  ${n.padEnd(10)}${c.summary}`)
  .join('\n')}

Run "fa <command> --help" for a command's options.`;

let failed = false;
function fail(e: unknown): void {
  if (failed) return; // one line, even if more errors arrive
  failed = true;
  try {
    process.stderr.write(formatError(e) + '\n');
  } finally {
    process.exit(1);
  }
}

export async function main(argv: readonly string[], io: Io = processIo): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined) throw argError(`missing command; one of ${Object.keys(COMMANDS).join(', ')} (fa --help)`);
  if (cmd === '--help' || cmd === '-h' || cmd === 'help') {
    const topic = rest[0] !== undefined ? COMMANDS[rest[0]] : undefined;
    io.out(topic ? topic.help : usage);
    return 0;
  }
  const c = Object.hasOwn(COMMANDS, cmd) ? COMMANDS[cmd] : undefined;
  if (!c) throw argError(`unknown command "${cmd}"; one of ${Object.keys(COMMANDS).join(', ')} (fa --help)`);
  return c.run(rest, io);
}

// Warnings and stray errors must not break the one-line contract.
process.removeAllListeners('warning');
process.on('warning', () => undefined);
process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);
process.stdout.on('error', () => undefined); // e.g. EPIPE from `fa backends | head -1`

main(process.argv.slice(2)).then(
  async (code) => {
    await resetBackends().catch(() => undefined);
    process.exit(code);
  },
  fail,
);
