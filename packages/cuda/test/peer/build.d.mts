/** Where the peer test addon is built. */
export const PEER_PATH: string;
/** Builds it with nvcc; null, or why it could not be built. */
export function buildPeer(): string | null;
