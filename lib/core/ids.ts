import { randomFillSync } from 'node:crypto'

// Every JSON run takes four fresh ids (request, run, session, audit entry). crypto.randomUUID() builds each
// by concatenating 20 short strings; here a batch of ids is written as ASCII into one buffer when the random
// bytes are drawn, and each id is a single 36-character string cut from it.
const BATCH = 256
const UUID_LENGTH = 36
const random = Buffer.alloc(16 * BATCH)
const text = Buffer.alloc(UUID_LENGTH * BATCH)
// each byte's two hex digits, as the two bytes they are written as
const HEX = Buffer.from('0123456789abcdef')
const HEX_PAIRS = new Uint16Array(256).map((_, byte) => HEX[byte >> 4]! | (HEX[byte & 0x0f]! << 8))
let next = BATCH

function refill (): void {
  randomFillSync(random)
  let out = 0
  for (let id = 0; id < BATCH; id++) {
    const bytes = id * 16
    // RFC 9562 version 4: the version nibble is 4, the variant bits are 10
    random[bytes + 6] = (random[bytes + 6]! & 0x0f) | 0x40
    random[bytes + 8] = (random[bytes + 8]! & 0x3f) | 0x80
    for (let i = 0; i < 16; i++) {
      if (i === 4 || i === 6 || i === 8 || i === 10) text[out++] = 0x2d // '-'
      const pair = HEX_PAIRS[random[bytes + i]!]!
      text[out++] = pair & 0xff
      text[out++] = pair >> 8
    }
  }
  next = 0
}

/** A random (version 4) UUID, as `crypto.randomUUID()` gives, from the same CSPRNG, for less garbage. */
export function randomId (): string {
  if (next === BATCH) refill()
  const start = next++ * UUID_LENGTH
  return text.toString('latin1', start, start + UUID_LENGTH)
}
