import type { SessionStore, SessionWithMessages } from '../stores/types.js'

/**
 * The session if it exists and belongs to `principal`; null otherwise. Another principal's session is
 * indistinguishable from a missing one: no probing, no takeover.
 */
export async function ownedSession (store: SessionStore, id: string, principal: string): Promise<SessionWithMessages | null> {
  const session = await store.get(id)
  return session === null || session.principal !== principal ? null : session
}
