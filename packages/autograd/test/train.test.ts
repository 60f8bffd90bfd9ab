/** The example: a tiny transformer trained from scratch on the cpu backend reverses held-out sequences. */
import { expect, it } from 'vitest';
import { train } from '../examples/reverse.mjs';

it('examples/reverse.mjs reaches >= 95% held-out accuracy in under 2 minutes on the cpu backend', async () => {
  const r = await train({}, (line) => console.log(line));
  console.log(`parameters ${r.parameters}, ${r.config.steps} steps, ${r.seconds.toFixed(1)} s, token accuracy ${(100 * r.tokenAccuracy).toFixed(2)}%, sequence accuracy ${(100 * r.sequenceAccuracy).toFixed(2)}%`);
  expect(r.tokenAccuracy).toBeGreaterThanOrEqual(0.95);
  expect(r.seconds).toBeLessThan(120);
});
