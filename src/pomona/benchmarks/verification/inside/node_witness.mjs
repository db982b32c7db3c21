// Pomona's witness in a `node --test` run: a reporter in the runner's own process, which runs
// no test file (each file runs in a process of its own), so the code under test does not run
// here. It renders the run's events with Node's own TAP reporter, as the task's command would,
// and sends every result line to the witness process over its socket; the verifier parses them
// with the task's own log parser and compares them with what the run printed.
import net from "node:net";
import { tap } from "node:test/reporters";

const RESULT = /^\s*(ok|not ok) \d+ /;

function connect() {
  const path = process.env.POMONA_WITNESS_SOCKET;
  if (!path) return null;
  const sock = net.createConnection(path);
  sock.on("error", () => {});
  return sock;
}

export default async function* witness(source) {
  const sock = connect();
  const send = (event) => sock && sock.write(JSON.stringify(event) + "\n");
  send({ event: "start", runner: "node-test", pid: process.pid, argv: process.argv,
         cwd: process.cwd(), version: process.version });
  let buffered = "";
  for await (const chunk of tap(source)) {
    buffered += chunk;
    const lines = buffered.split("\n");
    buffered = lines.pop();
    for (const line of lines) {
      if (RESULT.test(line)) send({ event: "tap", line });
    }
  }
  send({ event: "finish" });
  if (sock) await new Promise((done) => sock.end(done));
}
