// JWTs made by hand with node:crypto, so that tests can also make the broken ones (missing parts, bad
// base64, a swapped alg, an HMAC over a public key) that no signing library would produce.
import { constants, createHmac, generateKeyPairSync, sign } from 'node:crypto'
import type { KeyObject } from 'node:crypto'

export function b64url (value: string | Buffer): string {
  return Buffer.from(value).toString('base64url')
}

export type SigningKey =
  | { alg: 'HS256' | 'HS384' | 'HS512', secret: string | Buffer }
  | { alg: 'RS256' | 'PS256' | 'ES256' | 'ES384' | 'EdDSA', privateKey: KeyObject }
  | { alg: 'none' }

/** `header.payload.signature` for the given key; `header` fields override the defaults. */
export function signJwt (payload: Record<string, unknown>, key: SigningKey, header: Record<string, unknown> = {}): string {
  const head = b64url(JSON.stringify({ alg: key.alg, typ: 'JWT', ...header }))
  const body = b64url(JSON.stringify(payload))
  const data = `${head}.${body}`
  switch (key.alg) {
    case 'none': return `${data}.`
    case 'HS256': case 'HS384': case 'HS512':
      return `${data}.${createHmac(`sha${key.alg.slice(2)}`, key.secret).update(data).digest('base64url')}`
    case 'RS256': return `${data}.${sign('sha256', Buffer.from(data), key.privateKey).toString('base64url')}`
    case 'PS256':
      return `${data}.${sign('sha256', Buffer.from(data), { key: key.privateKey, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 }).toString('base64url')}`
    case 'ES256': case 'ES384':
      return `${data}.${sign(`sha${key.alg.slice(2)}`, Buffer.from(data), { key: key.privateKey, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`
    case 'EdDSA': return `${data}.${sign(null, Buffer.from(data), key.privateKey).toString('base64url')}`
  }
}

export function nowSeconds (): number {
  return Math.floor(Date.now() / 1000)
}

export interface KeyPair { publicPem: string, privateKey: KeyObject }

function pair (generated: { publicKey: KeyObject, privateKey: KeyObject }): KeyPair {
  return { publicPem: generated.publicKey.export({ type: 'spki', format: 'pem' }) as string, privateKey: generated.privateKey }
}

export function rsaKeys (): KeyPair {
  return pair(generateKeyPairSync('rsa', { modulusLength: 2048 }))
}

export function ecKeys (namedCurve = 'prime256v1'): KeyPair {
  return pair(generateKeyPairSync('ec', { namedCurve }))
}

export function ed25519Keys (): KeyPair {
  return pair(generateKeyPairSync('ed25519'))
}
