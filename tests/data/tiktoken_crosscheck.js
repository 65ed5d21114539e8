#!/usr/bin/env node
// Cross-checks `rdattn-data encode --tokenizer gpt2` against js-tiktoken's
// getEncoding('gpt2').encode(text, [], []) (encode_ordinary) on real text, id for id:
//   - SOTU 1790 (George Washington) and 2021 (Joseph R. Biden) addresses, as files;
//   - the whole SOTU corpus, the 233 files joined by "\n";
//   - the first 200 kB of the Jargon File (cut at the last newline before 200,000 bytes);
//   - a Unicode stress string (CRLF, NBSP, U+3000, U+2028, ZWSP, CJK, emoji with ZWJ, RTL, digits);
//   - `rdattn-data prepare --threads 1, 2, 4` on the SOTU files (--text) and --threads 4 on the
//     same documents as one gzipped JSONL file: each split's shards, id for id.
// Usage: node tiktoken_crosscheck.js --bin RDATTN_DATA --vocab-bpe PATH --js-tiktoken DIR
//                                    --sotu DIR --jargon GZ [--jargon GZ ...]
// Missing inputs are failures that say what to run, never skips. Exit 0 only when all agree.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { spawnSync } = require('child_process');

function fail(msg) {
  console.error('tiktoken_crosscheck: FAIL: ' + msg);
  process.exit(1);
}

const opts = { jargon: [] };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i], v = argv[i + 1];
  if (v === undefined) fail('flag ' + k + ' needs a value');
  if (k === '--bin') opts.bin = v;
  else if (k === '--vocab-bpe') opts.vocab = v;
  else if (k === '--js-tiktoken') opts.tiktoken = v;
  else if (k === '--sotu') opts.sotu = v;
  else if (k === '--jargon') opts.jargon.push(v);
  else fail('unknown flag ' + k);
}
for (const k of ['bin', 'vocab', 'tiktoken', 'sotu']) if (!opts[k]) fail('missing --' + k);

const FETCH = 'run scripts/fetch_data.sh';
if (!fs.existsSync(opts.bin)) fail(opts.bin + ' not built');
if (!fs.existsSync(opts.vocab)) fail(opts.vocab + ' is missing: ' + FETCH);
const modDir = path.join(opts.tiktoken, 'node_modules', 'js-tiktoken');
if (!fs.existsSync(path.join(modDir, 'package.json'))) fail(modDir + ' is missing: ' + FETCH);
const tiktokenVersion = require(path.join(modDir, 'package.json')).version;
const { getEncoding } = require(modDir);  // CommonJS entry: dist/index.cjs
const enc = getEncoding('gpt2');

function readUtf8(buf, what) {
  const text = buf.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(buf)) fail(what + ' is not valid UTF-8 (js-tiktoken would see U+FFFD)');
  return text;
}

function ours(buf) {
  const r = spawnSync(opts.bin, ['encode', '--tokenizer', 'gpt2', '--vocab-bpe', opts.vocab],
                      { input: buf, maxBuffer: 1 << 30 });
  if (r.error) fail('cannot run ' + opts.bin + ': ' + r.error.message);
  if (r.status !== 0) fail('rdattn-data encode exited ' + r.status + ': ' + r.stderr.toString());
  const out = r.stdout.toString().trim();
  return out === '' ? [] : out.split(' ').map(Number);
}

const cases = [];
const sotuFiles = fs.existsSync(opts.sotu) ? fs.readdirSync(opts.sotu).filter((f) => f.endsWith('.txt')).sort() : [];
if (sotuFiles.length !== 233) fail(opts.sotu + ' should hold the 233 SOTU .txt files, has ' + sotuFiles.length + ': ' + FETCH);
for (const f of ['1790_george_washington_n.txt', '2021_joseph_r_biden_d.txt']) {
  const p = path.join(opts.sotu, f);
  if (!fs.existsSync(p)) fail(p + ' is missing: ' + FETCH);
  cases.push({ name: 'sotu/' + f, buf: fs.readFileSync(p) });
}
cases.push({
  name: 'sotu/*.txt joined by "\\n" (233 files)',
  buf: Buffer.concat(sotuFiles.flatMap((f, i) => (i ? [Buffer.from('\n')] : []).concat([fs.readFileSync(path.join(opts.sotu, f))]))),
});
const jargon = opts.jargon.find((p) => fs.existsSync(p));
if (!jargon) fail('the Jargon File is missing (looked at ' + opts.jargon.join(', ') + '): ' + FETCH);
{
  const all = zlib.gunzipSync(fs.readFileSync(jargon));
  const cut = all.lastIndexOf(0x0a, 200000 - 1) + 1;  // whole lines, at most 200,000 bytes
  cases.push({ name: path.basename(jargon) + ' first ' + cut + ' bytes', buf: all.subarray(0, cut) });
}
cases.push({
  name: 'unicode stress string',
  buf: Buffer.from('Line one\r\nline\u00a0two\u3000three \u2028four\u2029 zero\u200bwidth \u6771\u4eac\u3067 ' +
                   '\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd ' +
                   '\u0661\u0662\u0663 \u00bd \u00b2 \u216b 12345678 they\'re   THEY\'RE  it\'s\t\ttabs\n\n\n  end  ', 'utf8'),
});

let bad = 0;
console.log('js-tiktoken ' + tiktokenVersion + ' vs ' + opts.bin);
for (const c of cases) {
  const text = readUtf8(c.buf, c.name);
  const t0 = Date.now();
  const ref = Array.from(enc.encode(text, [], []));
  const t1 = Date.now();
  const got = ours(c.buf);
  const t2 = Date.now();
  let diff = -1;
  for (let i = 0; i < Math.max(ref.length, got.length); i++) if (ref[i] !== got[i]) { diff = i; break; }
  const line = `${c.name}: ${c.buf.length} bytes, ${ref.length} tokens (js-tiktoken ${t1 - t0} ms), ` +
               `rdattn-data ${got.length} tokens (${t2 - t1} ms incl. start-up)`;
  if (diff < 0) {
    console.log('OK   ' + line);
  } else {
    bad++;
    console.log('DIFF ' + line + `; first difference at index ${diff}: js-tiktoken ` +
                JSON.stringify(ref.slice(Math.max(0, diff - 3), diff + 5)) + ' vs rdattn-data ' +
                JSON.stringify(got.slice(Math.max(0, diff - 3), diff + 5)) + ' near ' +
                JSON.stringify(enc.decode(ref.slice(Math.max(0, diff - 5), diff + 5))));
  }
}
// `rdattn-data prepare --threads N` (issue 26): the shards hold, split by split, [50256] + the
// js-tiktoken ids of each document, for N = 1, 2 and 4, from the SOTU files as --text and from the
// same documents as gzipped --jsonl.
const os = require('os');
const crypto = require('crypto');
function splitOf(id) {  // SplitOfDocument: SHA-256(id) as a big-endian integer, mod 1000
  const b = BigInt('0x' + crypto.createHash('sha256').update(id, 'utf8').digest('hex')) % 1000n;
  return b < 990n ? 'train' : b < 995n ? 'val' : 'test';
}
const want = { train: [], val: [], test: [] };
const jsonl = [];
for (const f of sotuFiles) {
  const text = readUtf8(fs.readFileSync(path.join(opts.sotu, f)), f);
  const ids = enc.encode(text, [], []);
  const w = want[splitOf(f)];
  w.push(50256);
  for (const id of ids) w.push(id);
  jsonl.push(JSON.stringify({ text, id: f }) + '\n');
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rdattn_crosscheck_'));
try {
  fs.writeFileSync(path.join(tmp, 'sotu.jsonl.gz'), zlib.gzipSync(Buffer.from(jsonl.join(''), 'utf8')));
  const runs = [];
  for (const n of [1, 2, 4]) runs.push({ n, inputs: ['--text'].concat(sotuFiles.map((f) => path.join(opts.sotu, f))) });
  runs.push({ n: 4, inputs: ['--jsonl', path.join(tmp, 'sotu.jsonl.gz')] });
  for (const r of runs) {
    const out = path.join(tmp, 'out_' + r.n + '_' + r.inputs[0].slice(2));
    const t0 = Date.now();
    const p = spawnSync(opts.bin, ['prepare', '--tokenizer', 'gpt2', '--vocab-bpe', opts.vocab, '--out', out,
                                   '--prefix', 's', '--shard-tokens', '400000', '--threads', String(r.n)]
                                     .concat(r.inputs), { maxBuffer: 1 << 26 });
    if (p.status !== 0) fail('rdattn-data prepare exited ' + p.status + ': ' + p.stderr.toString());
    const manifest = JSON.parse(fs.readFileSync(path.join(out, 's.manifest.json'), 'utf8'));
    const name = `prepare --threads ${r.n} ${r.inputs[0]} (${sotuFiles.length} SOTU documents)`;
    let diff = '';
    for (const split of ['train', 'val', 'test']) {
      const got = [];
      for (const sh of manifest.splits[split].shards) {
        const buf = fs.readFileSync(path.join(out, sh.file));
        const n = buf.readInt32LE(8);
        for (let i = 0; i < n; i++) got.push(buf.readUInt16LE(1024 + 2 * i));
      }
      const w = want[split];
      let at = -1;
      for (let i = 0; i < Math.max(w.length, got.length); i++) if (w[i] !== got[i]) { at = i; break; }
      if (at >= 0) diff += ` ${split}: ${got.length} vs ${w.length} tokens, first difference at ${at};`;
    }
    const tokens = want.train.length + want.val.length + want.test.length;
    if (diff) {
      bad++;
      console.log('DIFF ' + name + ':' + diff);
    } else {
      console.log(`OK   ${name}: ${tokens} tokens in ${Date.now() - t0} ms, every split as js-tiktoken`);
    }
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
if (bad) fail(bad + ' comparisons differ');
console.log('tiktoken_crosscheck: all ' + cases.length + ' texts and 4 prepare runs identical');
