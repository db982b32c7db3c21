// Pomona's guard, preloaded (--import) into every process of a `node --test` run, before the
// test file and the code under test load. It keeps its own references to what decides a test's
// outcome and how the process reports it (node:assert, node:test, process.exit and friends,
// the standard streams' write) and, when the process is about to end normally, tells the
// witness which of them were replaced. A process that never says so ended some other way
// (killed itself, exited early), and the verifier then never counts the run as resolved.
import assert from "node:assert";
import net from "node:net";
import * as nodeTest from "node:test";

const watched = [];
function watch(label, owner, names) {
  for (const name of names ?? Object.keys(owner)) {
    watched.push([`${label}.${name}`, owner, name, owner[name]]);
  }
}
watch("assert", assert);
watch("assert.strict", assert.strict);
watch("test", nodeTest.default ?? nodeTest);
watch("process", process, ["exit", "reallyExit", "kill", "abort", "emit", "on"]);
watch("stdout", process.stdout, ["write"]);
watch("stderr", process.stderr, ["write"]);

// only a test file's process (the runner starts each with this variable); the runner's own
// process reports through node_witness.mjs
const path = String(process.env.NODE_TEST_CONTEXT).startsWith("child")
  ? process.env.POMONA_WITNESS_SOCKET
  : undefined;
const sock = path ? net.createConnection(path) : null;
if (sock) {
  sock.on("error", () => {});
  sock.unref();
  sock.write(JSON.stringify({ event: "start", runner: "node-guard", pid: process.pid,
                              argv: process.argv }) + "\n");
}
let done = false;
process.prependListener("beforeExit", () => {
  if (done || !sock) return;
  done = true;
  const tampered = watched.filter(([, owner, name, value]) => owner[name] !== value)
                          .map(([label]) => `${label} was replaced`);
  sock.ref();
  sock.end(JSON.stringify({ event: "end", pid: process.pid, tampered }) + "\n");
});
