/**
 * Loads the engine packages that a --backend choice names, for the examples. Engine names are
 * not package names: `wasm` and `native` both live in @fa/wasm, so the hint for a missing one
 * must name the package that registers it.
 */
import { FAError, registeredBackendNames } from '@fa/core';

/** Which package registers each engine ('cpu' comes with @fa/core). */
export const ENGINE_PACKAGES = Object.freeze({ cpu: 'core', wasm: 'wasm', native: 'wasm', webgpu: 'webgpu', cuda: 'cuda' });

/**
 * Imports what `choice` needs: 'auto', one name, or names separated by commas. A name registered
 * already (say by --import) is used as it is; 'auto' loads every installed engine and skips the
 * rest; a named engine that is not installed is an FAError saying which package to install.
 */
export async function loadEngines(/** @type {string} */ choice) {
  const wanted = choice === 'auto' ? ['wasm', 'webgpu', 'cuda'] : choice.split(',').map((s) => s.trim());
  for (const name of wanted) {
    if (registeredBackendNames().includes(name)) continue;
    const pkg = ENGINE_PACKAGES[/** @type {keyof typeof ENGINE_PACKAGES} */ (name)];
    if (pkg === undefined) {
      throw new FAError('E_ARG', `unknown engine ${JSON.stringify(name)}; engines: ${Object.keys(ENGINE_PACKAGES).join(', ')}, or auto`);
    }
    const loaded = await import(`@fa/${pkg}`).then(
      () => true,
      // built in this monorepo but not linked into node_modules
      () => import(new URL(`../../${pkg}/dist/index.js`, import.meta.url).href).then(() => true, () => false),
    );
    if (!loaded && choice !== 'auto') throw new FAError('E_DEVICE', `engine ${name} is not installed (npm install @fa/${pkg})`);
    if (loaded && !registeredBackendNames().includes(name) && choice !== 'auto') {
      throw new FAError('E_DEVICE', `@fa/${pkg} loaded but did not register engine ${name}`);
    }
  }
}
