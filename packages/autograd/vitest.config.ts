import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// The cross-backend test runs @fa/webgpu when it can start: find the software Vulkan driver that
// scripts/setup-webgpu.sh installed, unless the caller chose one (as packages/webgpu does).
if (!process.env.VK_ICD_FILENAMES && !process.env.VK_DRIVER_FILES) {
  const dir = process.env.FA_VULKAN_DIR ?? '/opt/fa-vulkan';
  for (const icd of [join(dir, 'lvp_icd.json'), '/usr/lib/chromium/vk_swiftshader_icd.json']) {
    if (existsSync(icd)) {
      process.env.VK_ICD_FILENAMES = icd;
      break;
    }
  }
}
if (!process.env.XDG_RUNTIME_DIR) {
  const d = join(tmpdir(), `fa-xdg-${process.getuid?.() ?? 0}`);
  mkdirSync(d, { recursive: true });
  chmodSync(d, 0o700);
  process.env.XDG_RUNTIME_DIR = d;
}

export default defineConfig({
  resolve: {
    // Tests and examples import the built package (the CPU engine of @fa/core runs worker
    // threads from its dist files): build first.
    alias: [{ find: /^@fa\/autograd$/, replacement: fileURLToPath(new URL('./dist/index.js', import.meta.url)) }],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // The CPU engine uses every core; run test files one after another.
    fileParallelism: false,
  },
});
