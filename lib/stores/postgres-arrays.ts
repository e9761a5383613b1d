// Internal to the PostgreSQL stores: a group's columns sent as arrays in PostgreSQL's binary format (docs/stores.md,
// "Round trips"). pg sends a Buffer parameter as it is, marked binary: a text goes as its bytes, with no escaping and
// no array literal built here and parsed there (which cost a group statement most of its client-side CPU).

/** The element types the group statements' arrays hold (`$n::text[]`, …), and their type OIDs. */
const OIDS = { text: 25, int4: 23, bool: 16, timestamptz: 1184 } as const
export type ArrayType = keyof typeof OIDS

/** PostgreSQL's epoch, 2000-01-01T00:00:00Z, in ms since 1970: a timestamptz is µs since then. */
const PG_EPOCH_MS = 946_684_800_000
/** what an element is worth after its length, for the fixed-size types */
const WIDTH = { int4: 4, bool: 1, timestamptz: 8 } as const

/**
 * A one-dimensional array of `type` in PostgreSQL's binary format (array_recv): the header, then each element's
 * length (-1: NULL) and bytes. Texts are written as UTF-8 (a lone surrogate as U+FFFD, as pg writes a text
 * parameter); a timestamptz is a Date or ms since 1970, whole ms.
 */
export function pgArray (type: ArrayType, values: readonly unknown[]): Buffer {
  const count = values.length
  let size = 12 + (count > 0 ? 8 : 0) + 4 * count
  let nulls = 0
  if (type === 'text') {
    for (let i = 0; i < count; i++) {
      const value = values[i]
      if (value === null || value === undefined) nulls = 1
      else size += Buffer.byteLength(value as string)
    }
  } else {
    for (let i = 0; i < count; i++) {
      const value = values[i]
      if (value === null || value === undefined) nulls = 1
      else size += WIDTH[type]
    }
  }
  const buffer = Buffer.allocUnsafe(size)
  buffer.writeInt32BE(count > 0 ? 1 : 0, 0)
  buffer.writeInt32BE(nulls, 4)
  buffer.writeInt32BE(OIDS[type], 8)
  let at = 12
  if (count > 0) {
    buffer.writeInt32BE(count, 12)
    buffer.writeInt32BE(1, 16)
    at = 20
  }
  for (let i = 0; i < count; i++) {
    const value = values[i]
    if (value === null || value === undefined) {
      at = buffer.writeInt32BE(-1, at)
      continue
    }
    switch (type) {
      case 'text': {
        const written = buffer.write(value as string, at + 4)
        buffer.writeInt32BE(written, at)
        at += 4 + written
        break
      }
      case 'int4':
        at = buffer.writeInt32BE(4, at)
        at = buffer.writeInt32BE(value as number, at)
        break
      case 'bool':
        at = buffer.writeInt32BE(1, at)
        at = buffer.writeUInt8(value === true ? 1 : 0, at)
        break
      case 'timestamptz': {
        const ms = value instanceof Date ? value.getTime() : value as number
        at = buffer.writeInt32BE(8, at)
        at = buffer.writeBigInt64BE(BigInt(ms - PG_EPOCH_MS) * 1000n, at)
        break
      }
    }
  }
  return buffer
}

/** Each column of `rows` as an array of its type: `types[i]` is column i's. */
export function pgColumns (types: readonly ArrayType[], rows: ReadonlyArray<readonly unknown[]>): Buffer[] {
  return types.map((type, i) => pgArray(type, rows.map((row) => row[i])))
}
