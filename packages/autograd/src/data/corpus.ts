/**
 * A small text corpus for examples, tests and the demo (examples/gpt.mjs, `fa demo` part 9):
 * English-like sentences from a fixed grammar about a farm by a river, drawn by a seeded
 * generator, so the repository ships the corpus as these few lines (no data file, no licence to
 * track) and every run sees the same text.
 *
 *   when the hungry fox waits behind the mill, the old farmer feeds the goat near the well.
 *
 * Words repeat and sentences follow a grammar a small model can learn in seconds: the loss falls
 * from ln(vocab) as it learns spelling, then word order, then which words go together.
 */

import { FAError } from '@fa/core';

/** A deterministic generator (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS: Record<string, readonly string[]> = {
  adj: ['old', 'small', 'red', 'quiet', 'hungry', 'brave', 'tired', 'young'],
  animal: ['fox', 'hen', 'dog', 'cat', 'goat', 'crow', 'horse', 'duck'],
  person: ['farmer', 'miller', 'boy', 'girl', 'shepherd'],
  verb: ['sees', 'follows', 'feeds', 'chases', 'greets', 'finds', 'watches', 'calls'],
  rest: ['sleeps', 'sings', 'waits', 'runs', 'rests', 'hides'],
  prep: ['near', 'behind', 'under', 'beside', 'past', 'by'],
  place: ['barn', 'mill', 'river', 'gate', 'field', 'well', 'hill', 'road'],
  time: ['at dawn', 'at noon', 'in the rain', 'at night', 'every day'],
};

/**
 * `chars` characters (at least; cut at a sentence end) of the corpus for `seed`. Paragraphs of
 * three to six sentences, separated by newlines.
 */
export function makeCorpus(chars = 200_000, seed = 7): string {
  const r = rng(seed);
  const pick = (xs: readonly string[]): string => xs[Math.floor(r() * xs.length)];
  const noun = () => (r() < 0.6 ? pick(WORDS.animal) : pick(WORDS.person));
  const np = () => `the ${r() < 0.5 ? `${pick(WORDS.adj)} ` : ''}${noun()}`;
  const pp = () => `${pick(WORDS.prep)} the ${pick(WORDS.place)}`;
  const vp = () => {
    const core = r() < 0.6 ? `${pick(WORDS.verb)} ${np()}` : pick(WORDS.rest);
    const tail = r() < 0.5 ? ` ${pp()}` : r() < 0.3 ? ` ${pick(WORDS.time)}` : '';
    return core + tail;
  };
  const clause = () => `${np()} ${vp()}`;
  const sentence = () => {
    const u = r();
    if (u < 0.5) return `${clause()}.`;
    if (u < 0.75) return `${clause()} and ${clause()}.`;
    if (u < 0.9) return `when ${clause()}, ${clause()}.`;
    return `${clause()}, but ${clause()}.`;
  };
  const parts: string[] = [];
  let n = 0;
  while (n < chars) {
    const k = 3 + Math.floor(r() * 4);
    const para = Array.from({ length: k }, sentence).join(' ') + '\n';
    parts.push(para);
    n += para.length;
  }
  return parts.join('');
}

/** A character vocabulary: its size, and text ↔ token ids. */
export interface CharVocab {
  readonly size: number;
  encode(s: string): Int32Array;
  decode(ids: ArrayLike<number>): string;
}

/** The characters of a text, sorted, and encode/decode between text and token ids. */
export function charVocab(text: string): CharVocab {
  const chars = [...new Set(text)].sort();
  const index = new Map(chars.map((c, i) => [c, i]));
  return {
    size: chars.length,
    encode: (s: string) => Int32Array.from(s, (c) => {
      const i = index.get(c);
      if (i === undefined) throw new FAError('E_ARG', `the vocabulary has no ${JSON.stringify(c)}`);
      return i;
    }),
    decode: (ids: ArrayLike<number>) => Array.from(ids, (i) => chars[i]).join(''),
  };
}
