import createError from '@fastify/error'

// Every coded error the service throws. The error handler (lib/core/error-reply.ts) turns each
// into the service's error body (README.md, "Error codes"): { statusCode, error, message, code, requestId, traceId }.

export const AgentNotFoundError = createError('AGENT_NOT_FOUND', 'Agent "%s" not found', 404)
export const SessionNotFoundError = createError('SESSION_NOT_FOUND', 'Session "%s" not found', 404)
export const ApprovalNotFoundError = createError('APPROVAL_NOT_FOUND', 'Approval "%s" not found', 404)
export const RunNotFoundError = createError('RUN_NOT_FOUND', 'No resumable run "%s"', 404)
export const RouteNotFoundError = createError('ROUTE_NOT_FOUND', 'Route %s:%s not found', 404)
export const MethodNotAllowedError = createError('METHOD_NOT_ALLOWED', 'Method %s not allowed on %s', 405)
export const RunInProgressError = createError('RUN_IN_PROGRESS', 'Run "%s" is still in flight', 409)
export const RunRecordNotFoundError = createError('RUN_NOT_FOUND', 'Run "%s" not found', 404)
export const RunAlreadyEndedError = createError('RUN_ALREADY_ENDED', 'Run "%s" has already ended', 409)
export const SessionBusyError = createError('SESSION_BUSY', 'Session "%s" has a run in progress (%s): send multitask "interrupt" or "enqueue" to go on anyway', 409)
export const RunCancelledWhileQueuedError = createError('CANCELLED', 'Run "%s" was cancelled while it waited for its session', 409)
export const InvalidCursorParamError = createError('FST_ERR_VALIDATION', '%s must be a non-negative integer', 400)
export const EphemeralBackgroundError = createError('FST_ERR_VALIDATION', 'body/background cannot be combined with store: false (a background run is kept to be followed)', 400)
export const EphemeralSessionError = createError('FST_ERR_VALIDATION', 'body/sessionId is not allowed with store: false (an ephemeral run has no session)', 400)
export const RunSessionMismatchError = createError('RUN_SESSION_MISMATCH', 'Run "%s" belongs to another session', 400)
export const ApprovalAlreadyDecidedError = createError('APPROVAL_ALREADY_DECIDED', 'Approval "%s" was already decided', 409)
export const ApprovalExpiredError = createError('APPROVAL_EXPIRED', 'Approval "%s" has expired', 409)
export const UpgradeRequiredError = createError('UPGRADE_REQUIRED', 'This route only accepts WebSocket upgrades', 426)
export const RequestTimeoutError = createError('REQUEST_TIMEOUT', 'The request %s did not arrive within %d ms', 408)
export const HeadersTooLargeError = createError('HEADERS_TOO_LARGE', 'The request headers are too large', 431)
/** What Node's HTTP parser refuses (bad header bytes, conflicting lengths, an unknown method): its code names the fault. */
export const MalformedRequestError = createError('MALFORMED_REQUEST', 'The request is malformed (%s)', 400)
export const AgentError = createError('AGENT_ERROR', '%s', 500)
export const ShutdownError = createError('SHUTDOWN', 'The service is shutting down', 503)
export const StoreUnavailableError = createError('STORE_UNAVAILABLE', '%s', 503)
export const AgentTimeoutError = createError('AGENT_TIMEOUT', 'Agent "%s" did not finish within %d ms', 504)
export const UnauthorizedError = createError('UNAUTHORIZED', '%s', 401)
export const ForbiddenError = createError('FORBIDDEN', '%s', 403)
export const RateLimitedError = createError('RATE_LIMITED', 'Rate limit exceeded, retry in %s', 429)
/** The `quotas` option refuses a run; thrown with `headers: { 'retry-after' }` (lib/quotas/quotas.ts). */
export const QuotaExceededError = createError('QUOTA_EXCEEDED', '%s', 429)
/** A run's input that fails its agent's `input` schema: the same code and status as a body that fails its route's. */
export const InputValidationError = createError('FST_ERR_VALIDATION', '%s', 400)
/** Input no store could keep as it is, refused for every store alike (docs/operations.md): before anything runs. */
export const UnstorableInputError = createError('FA_UNSTORABLE_TEXT', '%s cannot be stored: it holds %s', 400)
export const JsonTooDeepError = createError('JSON_TOO_DEEP', 'The JSON is nested deeper than %d levels', 400)
export const IdempotencyKeyInvalidError = createError('IDEMPOTENCY_KEY_INVALID', '%s', 400)
export const IdempotencyKeyReusedError = createError('IDEMPOTENCY_KEY_REUSED', 'This idempotency key was used with another request body', 422)
export const IdempotencyInProgressError = createError('IDEMPOTENCY_IN_PROGRESS', 'A request with this idempotency key is still in progress', 409)

// Error frames of the WebSocket transport (the connection stays open); a run that cannot start there answers
// with the code its HTTP twin would have (AGENT_NOT_FOUND, …).
export const InvalidJsonMessageError = createError('INVALID_JSON', 'the message is not valid JSON', 400)
export const InvalidMessageError = createError('INVALID_MESSAGE', '%s', 400)
export const UnknownMessageTypeError = createError('UNKNOWN_MESSAGE_TYPE', 'unknown message type %s: expected "run.start" or "run.cancel"', 400)
export const TooManyRunsError = createError('TOO_MANY_RUNS', 'at most %d runs at once on one connection', 429)
export const RunNotInFlightError = createError('RUN_NOT_FOUND', 'No run "%s" in flight on this connection', 404)
export const InternalError = createError('INTERNAL_ERROR', '%s', 500)

/** Thrown at registration: one message naming every offending option path. */
export const InvalidOptionsError = createError('FST_AGENTS_INVALID_OPTIONS', 'invalid options: %s', 500)
/** Thrown at registration: a route would be served without the plugin that enforces one of its options (auth, …). */
export const MissingPluginError = createError('FST_AGENTS_MISSING_PLUGIN', '%s', 500)
/** A JSON run whose client went away before its answer: nobody reads it (logged and audited as 499). */
export const ClientClosedError = createError('CANCELLED', '%s', 499)

/** A JSON run taken over by another instance (its lease lapsed here): its answer is not this instance's to give. */
export const RunLostError = createError('INSTANCE_LOST', 'The run was taken over by another instance: follow it at /v1/runs/:runId/events', 503)

/** A JSON run cancelled (`POST /v1/runs/:runId/cancel`, another run's `multitask: 'interrupt'`) while its client waits. */
export const RunCancelledError = createError('CANCELLED', '%s', 409)

/** A durable step that differs from the run's journal (docs/durable-agents.md): the agent is not deterministic in its steps. */
export const StepMismatchError = createError('STEP_MISMATCH', 'Step %d is "%s" in this attempt, but "%s" in the run\'s journal: the run cannot go on from its journal', 500)
/** A JSON run that failed STEP_MISMATCH: its answer. */
export const RunStepMismatchError = createError('STEP_MISMATCH', '%s', 500)
/** A replay asked of a run that kept no checkpoint (it completed, or never saved one). */
export const NoCheckpointError = createError('NO_CHECKPOINT', 'Run "%s" kept no checkpoint to replay from', 409)
/** A fork point (beforeRunId, afterRunId) that is not a run of the session. */
export const ForkPointNotFoundError = createError('FST_ERR_VALIDATION', 'body/%s: run "%s" is not a run of session "%s"', 400)
/** An edited payload sent with a rejection: only an approval carries an edit. */
export const PayloadWithRejectionError = createError('FST_ERR_VALIDATION', '%s/payload is only allowed with approved: true (an edit of what is approved)', 400)

/** The HTTP error a failed JSON run answers with; `clientGone`: nobody reads it (recorded as 499). */
export function runFailureError (failure: { code: string, message: string, error?: unknown }, agent: string, timeoutMs: number | null, clientGone: boolean): Error {
  switch (failure.code) {
    case 'AGENT_TIMEOUT': return new AgentTimeoutError(agent, timeoutMs)
    case 'SHUTDOWN': return new ShutdownError()
    case 'INSTANCE_LOST': return new RunLostError()
    // the run's end could not be stored (a run that stopped here without ending)
    case 'STORE_UNAVAILABLE': return new StoreUnavailableError(failure.message)
    case 'CANCELLED': return clientGone ? new ClientClosedError(failure.message) : new RunCancelledError(failure.message)
    case 'STEP_MISMATCH': return new RunStepMismatchError(failure.message)
    // a store that failed the run (a checkpoint, the session's turn) is an outage, not the agent's fault
    default: return failure.error instanceof StoreUnavailableError ? failure.error : new AgentError(failure.message)
  }
}

// Errors of the stores (lib/stores). A client's mistake carries its status (a bad cursor: 400); a store's own
// failure carries none (status 0 here), so that a 500 body keeps its code to the log.
export const StoreClosedError = createError('FA_STORE_CLOSED', 'the store is closed', 0)
export const InvalidCursorError = createError('FA_INVALID_CURSOR', '%s must be the nextCursor of a previous page, as it came', 400, TypeError)
export const StoreApprovalNotFoundError = createError('FA_APPROVAL_NOT_FOUND', 'approval %s not found', 404)
export const RunLeaseLostError = createError('FA_RUN_LEASE_LOST', 'run %s is no longer this instance\'s: its lease was lost', 0)
export const RunLogGapError = createError('FA_RUN_LOG_GAP', 'run %s: expected event seq %d, got %d', 0)
/** A write that brings, at a seq the log holds, an event other than the one held (a retry is acknowledged only for the same events). */
export const RunLogConflictError = createError('FA_RUN_LOG_CONFLICT', 'run %s: event seq %d is held already, with another event', 0)
export const StoreApprovalExistsError = createError('FA_APPROVAL_EXISTS', 'approval %s already exists', 0)
/** A store backend whose driver (an optional peer dependency) is not installed. */
export const MissingDriverError = createError('FA_MISSING_DRIVER', '%s needs the optional dependency %s: npm install %s', 500)
/** A string a durable store cannot keep as it is (PostgreSQL text holds no NUL; no backend keeps a lone surrogate). */
export const UnstorableTextError = createError('FA_UNSTORABLE_TEXT', '%s cannot be stored in %s: it holds %s', 400)

// The front-end protocols (docs/front-ends.md).
/** A2A needs its optional peer dependency, loaded on the first A2A request. */
export const A2aUnavailableError = createError('A2A_UNAVAILABLE', 'A2A needs the optional peer dependency @a2a-js/sdk: npm install @a2a-js/sdk', 501)
export const McpUnavailableError = createError('MCP_UNAVAILABLE', 'MCP needs the optional peer dependency @modelcontextprotocol/sdk: npm install @modelcontextprotocol/sdk', 501)

// The OpenAI-shaped routes (/v1/responses, /v1/chat/completions): a response is a view of a run.
/** An unknown response id, another principal's, or one past its run's retention (or an ephemeral one's end). */
export const ResponseNotFoundError = createError('RESPONSE_NOT_FOUND', 'Response "%s" not found', 404)
export const ScheduleNotFoundError = createError('SCHEDULE_NOT_FOUND', 'Schedule "%s" not found', 404)
