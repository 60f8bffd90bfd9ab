// A Node module-resolution hook for the benchmark only. @tensorflow/tfjs-core 4.22 ships its
// gradient definitions (dist/register_all_gradients.js, needed by tf.grads) as ES modules with
// extensionless relative imports, which Node's ESM loader rejects; its Node bundle
// (tf-core.node.js) leaves them out. This hook retries such a relative import with ".js" (or
// "/index.js"). The gradients register into tfjs's global registry (on globalThis), which the
// Node bundle shares.
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (e) {
    if ((e.code === 'ERR_MODULE_NOT_FOUND' || e.code === 'ERR_UNSUPPORTED_DIR_IMPORT') && specifier.startsWith('.')) {
      try {
        return await next(`${specifier}.js`, context);
      } catch {
        return next(`${specifier}/index.js`, context);
      }
    }
    throw e;
  }
}
