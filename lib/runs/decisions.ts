// A human's decision on an approval (docs/durable-agents.md, "Decisions that edit or answer"), the same whoever takes
// it: POST /v1/approvals/:id, a front end's resume (AG-UI, the AI SDK chat), the console. An edited payload comes only
// with an approval and must match the schema the agent gave; anything wrong is a 400 before anything is decided.
import { PayloadWithRejectionError } from '../core/errors.js'
import { compileInputValidator } from '../core/validation.js'
import type { InputValidator } from '../core/validation.js'
import type { ApprovalDecision, ApprovalRecord } from '../stores/types.js'

/** What a decider sends. */
export interface DecisionFields {
  approved: boolean
  comment?: string | undefined
  /** the payload edited: only with `approved: true` */
  payload?: unknown
  response?: string | undefined
}

/** Compiled schemas, by their JSON text: the few an agent asks with are compiled once per instance, not per decision. */
const validators = new Map<string, InputValidator>()
const MAX_VALIDATORS = 256

function validatorOf (schema: Record<string, unknown>): InputValidator {
  const key = JSON.stringify(schema)
  let validate = validators.get(key)
  if (validate === undefined) {
    validate = compileInputValidator(schema)
    if (validators.size >= MAX_VALIDATORS) validators.delete(validators.keys().next().value!)
    validators.set(key, validate)
  }
  return validate
}

/** The decision to store. Throws FST_ERR_VALIDATION (400), naming `<path>/payload`, for a payload it cannot take. */
export function decisionOf (approval: ApprovalRecord, fields: DecisionFields, decidedBy: string | null, path = 'body'): ApprovalDecision {
  const edited = fields.payload !== undefined
  if (edited && !fields.approved) throw new PayloadWithRejectionError(path)
  if (edited && approval.schema !== undefined) validatorOf(approval.schema)(fields.payload, `${path}/payload`)
  const decision: ApprovalDecision = {
    approved: fields.approved,
    comment: fields.comment ?? null,
    decidedBy,
    decidedAt: new Date().toISOString(),
    payload: edited ? fields.payload : approval.payload,
    edited
  }
  if (fields.response !== undefined) decision.response = fields.response
  return decision
}
