// OpenWorkflow, given the workload of tasks-bench: `runs` runs of `steps` no-op steps,
// enqueued first, then drained by one worker in this process.
//
//   node drain.mjs --database-url URL --runs 1000 --steps 4 --concurrency 100
//
// Prints one JSON object on stdout. OpenWorkflow keeps its defaults (its schema
// `openworkflow`, migrations at connect, a postgres.js pool of its default size, a 30 s
// lease, polling from 100 ms backing off to 1 s) except the worker's concurrency, whose
// default is 1: it is given `--concurrency`, as the engine is. The drain is timed on the
// database clock, from just before `worker.start()` to the last run's `finished_at`.
import { OpenWorkflow } from "openworkflow";
import { BackendPostgres } from "openworkflow/postgres";
import postgres from "postgres";
import { readFileSync } from "node:fs";

const ENQUEUE_CONCURRENCY = 16;
const DRAIN_TIMEOUT_MS = 600_000;
const WORKFLOW = "bench-steps";

function parse(argv) {
  const args = { url: null, runs: 1000, steps: 4, concurrency: 100 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    switch (flag) {
      case "--database-url":
        args.url = value;
        break;
      case "--runs":
      case "--steps":
      case "--concurrency": {
        const n = Number.parseInt(value, 10);
        if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${flag}: not a positive integer: ${value}`);
        args[flag.slice(2)] = n;
        break;
      }
      default:
        throw new Error(`unknown argument ${flag}`);
    }
  }
  if (!args.url) throw new Error("--database-url is required");
  return args;
}

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")).version;
}

async function main() {
  const args = parse(process.argv.slice(2));
  const backend = await BackendPostgres.connect(args.url);
  const ow = new OpenWorkflow({ backend });
  const workflow = ow.defineWorkflow({ name: WORKFLOW }, async ({ input, step }) => {
    for (let i = 0; i < input.steps; i++) {
      await step.run({ name: `s${i}` }, async () => null);
    }
    return input.steps;
  });

  const enqueueBegun = performance.now();
  let next = 0;
  const enqueuer = async () => {
    while (next < args.runs) {
      next++;
      await workflow.run({ steps: args.steps });
    }
  };
  await Promise.all(Array.from({ length: ENQUEUE_CONCURRENCY }, enqueuer));
  const enqueueSeconds = (performance.now() - enqueueBegun) / 1000;

  // The harness's own two connections: the clock and the completion poll.
  const observer = postgres(args.url, { max: 2, onnotice: () => {} });
  const [{ begun }] = await observer`SELECT clock_timestamp() AS begun`;
  const wallBegun = performance.now();
  const worker = ow.newWorker({ concurrency: args.concurrency });
  await worker.start();
  const deadline = Date.now() + DRAIN_TIMEOUT_MS;
  let last;
  for (;;) {
    const [row] = await observer`
      SELECT count(*) FILTER (WHERE status = ${"completed"})::int AS completed,
             count(*) FILTER (WHERE status = ${"failed"})::int AS failed,
             max(finished_at) FILTER (WHERE status = ${"completed"}) AS last
        FROM openworkflow.workflow_runs WHERE workflow_name = ${WORKFLOW}`;
    if (row.failed > 0) throw new Error(`${row.failed} runs failed`);
    if (row.completed >= args.runs) {
      last = row.last;
      break;
    }
    if (Date.now() > deadline) throw new Error(`only ${row.completed} of ${args.runs} runs done`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const wallSeconds = (performance.now() - wallBegun) / 1000;
  await worker.stop();
  await backend.stop();
  await observer.end();

  const seconds = (last.getTime() - begun.getTime()) / 1000;
  const steps = args.runs * args.steps;
  console.log(
    JSON.stringify({
      peer: "openworkflow",
      version: `openworkflow ${version("openworkflow")}, postgres.js ${version("postgres")}, node ${process.versions.node}`,
      runs: args.runs,
      steps_per_run: args.steps,
      concurrency: args.concurrency,
      enqueue_runs_per_s: args.runs / enqueueSeconds,
      seconds,
      wall_seconds: wallSeconds,
      workflows_per_s: args.runs / seconds,
      steps_per_s: steps / seconds,
      settings: {
        worker_concurrency: args.concurrency,
        worker_concurrency_default: 1,
        pool: "postgres.js default (10 connections)",
        lease_ms: 30000,
        poll: "100 ms, backing off to 1 s when idle",
      },
    }),
  );
}

main().catch((error) => {
  console.error(`openworkflow peer: ${error?.stack ?? error}`);
  process.exit(1);
});
