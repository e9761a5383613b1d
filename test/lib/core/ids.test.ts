import t from 'tap'
import { randomId } from '../../../lib/core/ids.js'

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

t.test('randomId gives version 4 UUIDs, all different, across many refills of its batch', async (t) => {
  const seen = new Set<string>()
  let malformed = 0
  for (let i = 0; i < 5_000; i++) {
    const id = randomId()
    if (!UUID_V4.test(id)) malformed++
    seen.add(id)
  }
  t.equal(malformed, 0, 'every id is a lower-case v4 UUID with the RFC 9562 variant')
  t.equal(seen.size, 5_000, 'no id repeats')
})

t.test('randomId ids are plain strings that outlive the batch they were cut from', async (t) => {
  const first = randomId()
  const copy = `${first}`
  for (let i = 0; i < 600; i++) randomId()
  t.equal(first, copy, 'refilling the buffer does not change an id already given out')
  t.equal(typeof first, 'string')
  t.equal(first.length, 36)
})
