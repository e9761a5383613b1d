/** What a route needs beyond being authenticated (JWT roles; every api key has every right): docs/auth-and-traffic.md. */
export type Access = 'run' | 'readApprovals' | 'decideApprovals'
