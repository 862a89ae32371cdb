// BullMQ in make bench-peers: queue.add one job at a time, and a Worker of the given concurrency,
// both with BullMQ's defaults (completed jobs are kept: removeOnComplete is off). It speaks the
// protocol of internal/benchpeers/peer (ready, go, done <json>, stop) with the same flags as the
// Go peers: -url -mode -n -c -work -rate. The harness installs bullmq with npm beside a copy of
// this file.
'use strict';

const readline = require('node:readline');
const { Queue, Worker } = require('bullmq');

const QUEUE = 'bench';

function flags(argv) {
  const f = { url: '', mode: 'work', n: 1000, c: 50, work: 0, rate: 0 };
  for (const a of argv) {
    const m = /^--?(\w+)=(.*)$/.exec(a);
    if (!m) throw new Error(`peer.js: flags are -name=value, not ${a}`);
    const [, k, v] = m;
    if (k === 'work') f.work = durationMs(v);
    else if (k === 'url' || k === 'mode') f[k] = v;
    else f[k] = Number(v);
  }
  return f;
}

// durationMs reads the Go durations the harness passes ("0s", "5ms", "1.5s", "500µs").
function durationMs(s) {
  const m = /^([0-9.]+)(ns|us|µs|ms|s)?$/.exec(s);
  if (!m) throw new Error(`peer.js: -work=${s} is not a duration`);
  const scale = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000 }[m[2] || 's'];
  return Number(m[1]) * scale;
}

// nowNs is the wall clock in Unix nanoseconds (to the microsecond), as the Go peers' bodies.
const nowNs = () => Math.round((performance.timeOrigin + performance.now()) * 1e6);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentiles(ms) {
  if (ms.length === 0) return [0, 0];
  const s = Float64Array.from(ms).sort();
  const at = (q) => s[Math.floor(q * (s.length - 1))];
  return [at(0.5), at(0.99)];
}

const say = (line) => process.stdout.write(line + '\n');
const done = (r) => say('done ' + JSON.stringify(r));

async function main() {
  const f = flags(process.argv.slice(2));
  const u = new URL(f.url);
  const connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const await_ = async (want) => {
    const { value, done: closed } = await lines.next();
    if (closed || value.trim() !== want) throw new Error(`peer.js: expected ${want}, got ${closed ? 'EOF' : value}`);
  };

  if (f.mode === 'enqueue') {
    const queue = new Queue(QUEUE, { connection });
    await queue.waitUntilReady();
    say('ready');
    await await_('go');
    let next = 0;
    let errors = 0;
    const latency = [];
    const start = performance.now();
    const caller = async () => {
      for (let i = next++; i < f.n; i = next++) {
        if (f.rate > 0) await sleep(start + (i / f.rate) * 1000 - performance.now());
        const t = performance.now();
        try {
          await queue.add('noop', { at: nowNs() });
          latency.push(performance.now() - t);
        } catch (err) {
          if (++errors === 1) console.error('peer.js: add:', err);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(f.c, 1) }, caller));
    const [p50, p99] = percentiles(latency);
    done({ jobs: latency.length, errors, p50_ms: p50, p99_ms: p99 });
    await await_('stop');
    await queue.close();
    return;
  }
  if (f.mode !== 'work') throw new Error(`peer.js: unknown -mode ${f.mode}`);

  let ran = 0;
  let errors = 0;
  const waited = [];
  let all;
  const finished = new Promise((r) => { all = r; });
  const worker = new Worker(QUEUE, async (job) => {
    const wait = (nowNs() - job.data.at) / 1e6;
    if (f.work > 0) await sleep(f.work);
    if (typeof job.data.at !== 'number') errors++;
    if (++ran <= f.n) {
      waited.push(wait);
      if (ran === f.n) all();
    }
  }, { connection, concurrency: f.c, autorun: false });
  worker.on('error', (err) => console.error('peer.js: worker:', err));
  await worker.waitUntilReady();
  say('ready');
  await await_('go');
  const running = worker.run();
  await finished;
  const [p50, p99] = percentiles(waited);
  done({ jobs: f.n, errors, p50_ms: p50, p99_ms: p99 });
  await await_('stop');
  await worker.close(); // waits for the jobs taken
  await running;
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
