/** Runs a job's units on this thread: what a worker does with a message, and the inline path. */
import { runBackward, runDvec } from './backward.js';
import { runForward } from './forward.js';
import { runKVCache } from './kvcache.js';
import type { Job, Workspace } from './job.js';

export function runJob(job: Job, ws: Workspace): void {
  if (job.kind === 'forward') runForward(job, ws);
  else if (job.kind === 'dvec') runDvec(job, ws);
  else if (job.kind === 'kvcache') runKVCache(job, ws);
  else runBackward(job, ws);
}
