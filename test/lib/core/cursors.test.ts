// The listings' cursors, written and read in one place for every backend (lib/core/cursors.ts): what a store hands
// out reads back as it was; nothing else does.
import t from 'tap'
import { decodeKeyCursor, decodeSeqCursor, encodeKeyCursor, encodeSeqCursor, seqParam } from '../../../lib/core/cursors.js'

t.test('what is handed out reads back as it was, at the edges of the ranges', async (t) => {
  for (const seq of [0, 1, 42, Number.MAX_SAFE_INTEGER]) t.equal(decodeSeqCursor(encodeSeqCursor(seq)), String(seq))
  t.equal(decodeSeqCursor(encodeSeqCursor('123')), '123', 'a bigint column\'s text')
  for (const [ms, id] of [[0, 'a'], [Date.now(), 'b7d1c2e0-…-é ✓'], [8.64e15, ''], [1, 'x'.repeat(256)]] as const) {
    t.same(decodeKeyCursor(encodeKeyCursor(ms, id)), { ms, id })
  }
})

t.test('anything else is FA_INVALID_CURSOR naming the parameter', async (t) => {
  const invalid = { code: 'FA_INVALID_CURSOR', statusCode: 400, message: 'cursor must be the nextCursor of a previous page, as it came' }
  t.throws(() => decodeSeqCursor(encodeSeqCursor(Number.MAX_SAFE_INTEGER + 1)), invalid)
  t.throws(() => decodeKeyCursor(encodeKeyCursor(8.64e15 + 1, 'x')), invalid)
  t.throws(() => decodeKeyCursor(encodeKeyCursor(0, 'x'.repeat(257))), invalid, 'an id longer than any listing hands out')
  t.throws(() => decodeKeyCursor(encodeSeqCursor(1)), invalid, 'a seq cursor is not a key cursor')
  t.throws(() => decodeSeqCursor(encodeKeyCursor(1, 'x')), invalid, 'nor the other way round')
  t.throws(() => decodeKeyCursor(Buffer.from('[1,').toString('base64url')), invalid, 'JSON cut short')
})

t.test('a run\'s event cursor: a non-negative safe integer, else FST_ERR_VALIDATION naming where it came from', async (t) => {
  t.equal(seqParam('0', 'querystring/after'), 0)
  t.equal(seqParam(String(Number.MAX_SAFE_INTEGER), 'Last-Event-ID'), Number.MAX_SAFE_INTEGER)
  for (const value of ['', '-1', '01', '1.5', '1e3', ' 1', String(Number.MAX_SAFE_INTEGER + 1), '99999999999999999']) {
    t.throws(() => seqParam(value, 'Last-Event-ID'), { code: 'FST_ERR_VALIDATION', statusCode: 400, message: 'Last-Event-ID must be a non-negative integer' }, JSON.stringify(value))
  }
})
