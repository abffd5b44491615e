// Serve dynalite (in memory, tables ACTIVE at once) for the embedded backend.
// Usage: node dynalite_launcher.js <dynalite package dir> <host> <port, 0 = any free> <parent pid, 0 = none>
// Writes {"port": N} as one line on stdout once listening; exits 0 on SIGTERM/SIGINT, and by itself when
// the parent process is gone, so a killed test run leaves no server behind.
'use strict'

const [dir, host, port, parentPid] = process.argv.slice(2)
const dynalite = require(dir)
const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })

server.on('error', (err) => {
  console.error(`dynalite: cannot listen on ${host}:${port}: ${err.message}`)
  process.exit(1)
})
server.listen(Number(port), host, () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n')
})

// Open keep-alive connections would hold a graceful close for up to 30 s; the store is in memory.
process.on('SIGTERM', () => process.exit(0))
process.on('SIGINT', () => process.exit(0))
if (Number(parentPid)) {
  setInterval(() => { if (process.ppid !== Number(parentPid)) process.exit(0) }, 500).unref()
}
