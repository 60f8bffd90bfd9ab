import { existsSync, mkdirSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

// Find the software Vulkan driver that scripts/setup-webgpu.sh installed, unless the caller chose
// one. The forks pool starts its workers after this runs, so they inherit the variables.
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
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 600_000,
    hookTimeout: 600_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
