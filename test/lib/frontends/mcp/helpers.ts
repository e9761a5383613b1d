// An MCP client of the SDK's own (Client + StreamableHTTPClientTransport) on a service listening on a real socket.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import type { ElicitRequest, ElicitResult } from '@modelcontextprotocol/sdk/types.js'
import type { Test } from 'tap'

export interface ClientOptions {
  headers?: Record<string, string>
  /** declares form elicitation and answers each request with this */
  elicit?: (request: ElicitRequest) => ElicitResult | Promise<ElicitResult>
}

/** A connected client of `${url}/v1/mcp`, closed when `t` ends. */
export async function mcpClient (t: Test, url: string, options: ClientOptions = {}): Promise<{ client: Client, transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: 'test', version: '1.0.0' }, {
    capabilities: options.elicit === undefined ? {} : { elicitation: { form: {} } }
  })
  if (options.elicit !== undefined) client.setRequestHandler(ElicitRequestSchema, options.elicit)
  const transport = new StreamableHTTPClientTransport(new URL('/v1/mcp', url), { requestInit: { headers: options.headers ?? {} } })
  await client.connect(transport)
  t.teardown(() => client.close())
  return { client, transport }
}

/** A raw JSON-RPC POST to /v1/mcp (what no SDK client would send). */
export async function post (url: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number, headers: Headers, text: string }> {
  const res = await fetch(new URL('/v1/mcp', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body
  })
  return { status: res.status, headers: res.headers, text: await res.text() }
}
