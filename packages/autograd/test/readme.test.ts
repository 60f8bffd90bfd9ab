/** The README's attention-block example runs as written (as a plain ES module, with Node). */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

it('README: the attention block and a training step run', async () => {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const code = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(code).toBeDefined();
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', code!], { cwd: root, timeout: 120_000 });
  console.log(stdout);
  expect(stdout).toMatch(/held for backward: .* in \d+ nodes/);
  expect(stdout).toMatch(/checkpoint +×2/);
  expect(stdout).toMatch(/loss \d+\.\d+/);
});
