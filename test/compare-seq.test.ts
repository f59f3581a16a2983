import { describe, expect, it } from 'vitest';
import { compareSeq } from '../lib/sql/claim-batch.js';

describe('compareSeq (a claim publishes in seq order)', () => {
  it('orders bigint strings as numbers, across lengths and past 2^53', () => {
    const seqs = [
      '10',
      '9',
      '100',
      '1',
      '99',
      '9007199254740993',
      '9007199254740992',
      '9223372036854775807',
      '11',
    ];
    const byNumber = [...seqs].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0));
    expect([...seqs].sort(compareSeq)).toEqual(byNumber);
    expect(byNumber).toEqual([
      '1',
      '9',
      '10',
      '11',
      '99',
      '100',
      '9007199254740992',
      '9007199254740993',
      '9223372036854775807',
    ]);
    expect(compareSeq('42', '42')).toBe(0);
  });
});
