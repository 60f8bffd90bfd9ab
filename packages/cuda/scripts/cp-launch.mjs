#!/usr/bin/env node
// Starts N local ranks of a command, one per GPU, for context parallelism over NCCL:
//   node scripts/cp-launch.mjs --nproc 2 -- node my-ring-script.mjs [args]
// Each rank gets FA_RANK, FA_WORLD_SIZE, FA_LOCAL_RANK (its GPU) and FA_NCCL_ID_FILE (the
// rendezvous); output is prefixed with the rank; if one rank fails the others are stopped.
// The exit code is the first failing rank's, or 0.
import { launchLocal } from '../dist/parallel/launch.js';

const argv = process.argv.slice(2);
const sep = argv.indexOf('--');
const opts = sep < 0 ? argv : argv.slice(0, sep);
const cmd = sep < 0 ? [] : argv.slice(sep + 1);
const i = opts.indexOf('--nproc');
const nproc = i >= 0 ? Number(opts[i + 1]) : NaN;
if (!Number.isSafeInteger(nproc) || nproc < 1 || cmd.length === 0) {
  console.error('usage: cp-launch --nproc N -- <command> [args...]');
  process.exit(2);
}
const r = await launchLocal({ nproc, command: cmd[0], args: cmd.slice(1) });
if (r.code !== 0) console.error(`cp-launch: rank ${r.codes.findIndex((c, k) => c !== 0 || r.signals[k])} failed (exit codes ${r.codes.map((c, k) => c ?? r.signals[k]).join(', ')})`);
process.exit(r.code);
