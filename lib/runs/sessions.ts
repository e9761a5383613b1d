import type { Message, SessionStore, SessionWithMessages } from '../stores/types.js'

/**
 * The session if it exists and belongs to `principal`; null otherwise. Another principal's session is
 * indistinguishable from a missing one: no probing, no takeover.
 */
export async function ownedSession (store: SessionStore, id: string, principal: string): Promise<SessionWithMessages | null> {
  const session = await store.get(id)
  return session === null || session.principal !== principal ? null : session
}

/** The session's messages, then those the request gave (none given: the session's, as they are). */
export function withGiven (history: Message[] | undefined, given: Message[] | undefined): Message[] | undefined {
  if (given === undefined || given.length === 0) return history
  return history === undefined ? given : [...history, ...given]
}
