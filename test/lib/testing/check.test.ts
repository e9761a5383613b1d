// The assertions of the exported store suites (lib/testing/check.ts): tap's semantics where the suites rely on them,
// node:assert's errors, teardowns run whatever happens.
import { AssertionError } from 'node:assert'
import t from 'tap'
import { Check, checked, eventually, matches } from '../../../lib/testing/check.js'

t.test('matches: the patterns the suites use', async (t) => {
  t.ok(matches('abc', 'abc'))
  t.ok(matches(Number.NaN, Number.NaN))
  t.notOk(matches('abc', 'ab'), 'a string is equal, not contained')
  t.ok(matches('tok_123', /^tok_\d+$/))
  t.ok(matches('x', String))
  t.notOk(matches(1, String))
  t.ok(matches(1, Number))
  t.notOk(matches(Number.POSITIVE_INFINITY, Number))
  t.ok(matches(false, Boolean))
  t.ok(matches(new RangeError('x'), RangeError))
  t.notOk(matches('x', RangeError))
  t.notOk(matches(null, RangeError))
  t.ok(matches(new Error('gone'), new Error('gone')))
  t.notOk(matches(new Error('gone'), new Error('other')))
  t.notOk(matches({ message: 'gone', name: 'Error' }, new Error('gone')))
  t.ok(matches({ a: 1, b: { c: 'x', d: 2 } }, { b: { c: 'x' } }))
  t.notOk(matches({ a: 1 }, { b: undefined }), 'a field of the pattern must be there')
  t.notOk(matches({ a: 1 }, { a: 2 }))
  t.notOk(matches(1, { a: 1 }))
  t.notOk(matches({ a: 1 }, null))
  t.ok(matches([{ a: 1, b: 2 }, { a: 3 }, 'extra'], [{ a: 1 }, { a: 3 }]), 'an array: its first entries')
  t.notOk(matches([{ a: 1 }], [{ a: 1 }, { a: 3 }]))
  t.notOk(matches({ 0: 1 }, [1]))
})

t.test('Check: each assertion passes and fails as node:assert does', async (t) => {
  const check = new Check(undefined)
  check.equal(1, 1)
  check.not(1, 2)
  check.same({ a: [1, { b: new Date(0) }] }, { a: [1, { b: new Date(0) }] })
  check.same(Object.assign(Object.create(null), { a: 1 }), { a: 1 }, 'whatever the prototype')
  check.strictSame({ a: 1 }, { a: 1 })
  check.ok(1)
  check.notOk(0)
  check.type('x', 'string')
  check.match({ a: 1, b: 2 }, { a: 1 })
  t.throws(() => { check.equal(1, 2) }, AssertionError)
  t.throws(() => { check.not(1, 1) }, AssertionError)
  t.throws(() => { check.same({ a: 1 }, { a: 2 }) }, AssertionError)
  t.throws(() => { check.strictSame(Object.create(null), {}) }, AssertionError)
  t.throws(() => { check.ok(0) }, AssertionError)
  t.throws(() => { check.notOk(1) }, AssertionError)
  t.throws(() => { check.type(1, 'string') }, /typeof 1 is string/)
  t.throws(() => { check.match({ a: 1 }, { a: 2 }) }, /does not match/)
  t.throws(() => { check.match({ a: 1 }, { a: 2 }, 'mine') }, /mine/)
})

t.test('Check.rejects: a class, the very error, a pattern; a promise or a function', async (t) => {
  const check = new Check(undefined)
  const error = Object.assign(new RangeError('bad'), { code: 'FA_BAD' })
  await check.rejects(Promise.reject(error), RangeError)
  await check.rejects(Promise.reject(error), error)
  await check.rejects(async () => { throw error }, { code: 'FA_BAD' })
  await check.rejects(Promise.reject(undefined), Error, 'a rejection with nothing is an error')
  await t.rejects(check.rejects(Promise.resolve(1), RangeError), /expected a rejection/)
  await t.rejects(check.rejects(Promise.resolve(1), RangeError, 'mine'), /mine/)
  await t.rejects(check.rejects(Promise.reject(error), TypeError), /rejected with RangeError: bad/)
  await t.rejects(check.rejects(Promise.reject(error), { code: 'OTHER' }, 'mine'), /mine/)
})

t.test('Check: teardowns last first, all of them, the first error thrown after', async (t) => {
  const check = new Check(undefined)
  const order: string[] = []
  check.teardown(() => { order.push('first') })
  check.teardown(() => { order.push('second'); throw new Error('second failed') })
  check.teardown(async () => { order.push('third'); throw new Error('third failed') })
  await t.rejects(check.end(), /third failed/)
  t.same(order, ['third', 'second', 'first'])
  await check.end()
  t.same(order, ['third', 'second', 'first'], 'each runs once')
})

t.test('Check.comment goes to the runner: tap comment, node:test diagnostic, or nowhere', async (t) => {
  const said: string[] = []
  new Check({ comment: (m: string) => said.push(`comment ${m}`) }).comment('a')
  new Check({ diagnostic: (m: string) => said.push(`diagnostic ${m}`) }).comment('b')
  new Check(undefined).comment('c')
  new Check({}).comment('d')
  t.same(said, ['comment a', 'diagnostic b'])
})

t.test('checked: the body gets a Check with the runner\'s context; its teardowns run even when it fails', async (t) => {
  const registered: Array<{ name: string, fn: (context: string) => Promise<void> }> = []
  const test = checked<string>((name, fn) => { registered.push({ name, fn }) })
  let undone = 0
  test('passes', async (t) => {
    t.teardown(() => { undone++ })
    t.equal(t.context, 'ctx')
  })
  test('fails', async (t) => {
    t.teardown(() => { undone++ })
    t.equal(1, 2)
  })
  t.same(registered.map((r) => r.name), ['passes', 'fails'])
  await registered[0]!.fn('ctx')
  await t.rejects(registered[1]!.fn('ctx'), AssertionError)
  t.equal(undone, 2)
})

t.test('eventually: the first value other than undefined or false; an AssertionError at the deadline', async (t) => {
  let calls = 0
  t.equal(await eventually(() => ++calls >= 3 && calls), 3)
  await t.rejects(eventually(() => false, 30, 'the thing'), { name: 'AssertionError', message: 'the thing not met within 30 ms' })
  await t.rejects(eventually(async () => undefined, 30), { message: 'the condition not met within 30 ms' })
})
