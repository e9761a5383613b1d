// Counting objects by constructor in a V8 heap snapshot: "back to baseline" means no object that belongs
// to a stream is left, whatever V8 keeps for itself (optimised code, Node's pool of HTTP parsers).
import { readFileSync, rmSync } from 'node:fs'

export function countObjects (file, names) {
  const snapshot = JSON.parse(readFileSync(file, 'utf8'))
  const fields = snapshot.snapshot.meta.node_fields
  const objectType = snapshot.snapshot.meta.node_types[0].indexOf('object')
  const width = fields.length
  const typeAt = fields.indexOf('type')
  const nameAt = fields.indexOf('name')
  const wanted = new Map(names.map((name) => [snapshot.strings.indexOf(name), name]))
  const counts = Object.fromEntries(names.map((name) => [name, 0]))
  const nodes = snapshot.nodes
  for (let i = 0; i < nodes.length; i += width) {
    if (nodes[i + typeAt] !== objectType) continue
    const name = wanted.get(nodes[i + nameAt])
    if (name !== undefined) counts[name]++
  }
  return counts
}

/** Has the server write a snapshot (after a full GC), counts `names` in it, removes the file. */
export async function countServerObjects (server, file, names) {
  await server.call('snapshot', 120_000, file)
  try {
    return countObjects(file, names)
  } finally {
    rmSync(file, { force: true })
  }
}
