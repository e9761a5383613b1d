import t from 'tap'
import { iso, toMs } from '../../lib/stores/common.js'

// iso() remembers the last millisecond it formatted (bench profile: toISOString on every run's hot path).
t.test('iso formats numbers, strings and dates, the same millisecond twice from memory', async (t) => {
  t.equal(iso(0), '1970-01-01T00:00:00.000Z')
  t.equal(iso(0), '1970-01-01T00:00:00.000Z')
  t.equal(iso(1), '1970-01-01T00:00:00.001Z')
  t.equal(iso('1970-01-01T00:00:00.002Z'), '1970-01-01T00:00:00.002Z')
  t.equal(iso(new Date(3)), '1970-01-01T00:00:00.003Z')
  t.equal(iso(1), '1970-01-01T00:00:00.001Z', 'a string or a Date does not disturb the remembered number')
  t.throws(() => iso(Number.NaN), RangeError, 'an invalid time still throws, every time')
  t.throws(() => iso(Number.NaN), RangeError)
})

t.test('toMs reads back the millisecond iso() formatted last, and parses anything else', async (t) => {
  const now = Date.now()
  t.equal(toMs('at', iso(now)), now)
  t.equal(toMs('at', '1970-01-01T00:00:00.005Z'), 5)
  t.equal(toMs('at', iso(now)), now)
  t.throws(() => toMs('at', ''), /at must be an ISO-8601 date/)
  t.throws(() => toMs('at', 'soon'), /at must be an ISO-8601 date/)
})
