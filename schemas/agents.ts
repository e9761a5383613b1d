import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentName, Metadata } from './common.js'

export const AgentInfo = Type.Object({
  name: Type.String(),
  description: Type.String(),
  metadata: Metadata
}, { title: 'AgentInfo' })
export type AgentInfo = Static<typeof AgentInfo>

export const AgentList = Type.Object({ agents: Type.Array(AgentInfo) }, { title: 'AgentList' })
export type AgentList = Static<typeof AgentList>

export const AgentParams = Type.Object({ name: AgentName }, { additionalProperties: false })
