// Types of vulkan-driver.mjs (which says what each function is for).
export function prepareDawnForTests(env?: NodeJS.ProcessEnv): void;
