// Which Vulkan driver Dawn (the `webgpu` package behind @fa/webgpu in Node) gets in a test run:
// the one place that knows, for the vitest configs of packages/webgpu and packages/autograd.
//
// Plain JavaScript imported by relative path, so that it needs no build step: vitest loads a
// package's config before that package is built. Types: vulkan-driver.d.mts.
// (The `fa` command's own checks, apps/demo/src/engines.ts, answer a different question, whether
// the system has any driver at all, and ship inside the demo's dist/, which runs without this
// repository's scripts/ when packed for the GPU machine.)
import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The software drivers (ICD files) scripts/setup-webgpu.sh provides, best first: its lavapipe
 * under $FA_VULKAN_DIR (default /opt/fa-vulkan), then SwiftShader from Debian's chromium.
 */
function softwareIcdCandidates(env = process.env) {
  const dir = env.FA_VULKAN_DIR ?? '/opt/fa-vulkan';
  return [join(dir, 'lvp_icd.json'), '/usr/lib/chromium/vk_swiftshader_icd.json'];
}

/**
 * For a test run: unless the caller chose a driver, points the Vulkan loader at the first
 * installed software one (VK_ICD_FILENAMES); and gives the process a private mode-700
 * XDG_RUNTIME_DIR when it has none, which silences a harmless warning. Call it at the top of a
 * vitest config: the forks pool starts its workers afterwards, so they inherit the variables.
 */
export function prepareDawnForTests(env = process.env) {
  if (!env.VK_ICD_FILENAMES && !env.VK_DRIVER_FILES) {
    const icd = softwareIcdCandidates(env).find((f) => existsSync(f));
    if (icd) env.VK_ICD_FILENAMES = icd;
  }
  if (!env.XDG_RUNTIME_DIR) {
    const d = join(tmpdir(), `fa-xdg-${process.getuid?.() ?? 0}`);
    mkdirSync(d, { recursive: true });
    chmodSync(d, 0o700);
    env.XDG_RUNTIME_DIR = d;
  }
}
