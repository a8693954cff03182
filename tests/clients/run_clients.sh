#!/usr/bin/env bash
# Real-client tests: each client publishes, blocks in CONSUME, ACKs, runs a MULTI/EXEC and a plain
# pipeline, round-trips a binary payload and reads INFO, with its default settings, against a
# real deferq and redis-server (docs/commands.md).
#
#   tests/clients/run_clients.sh /path/to/deferq
#
# Starts redis-server and deferq on free loopback ports (and a second deferq with
# auth.required = true, whose URL DEFERQ_AUTH_URL = redis://namespace:token@host:port the redis-py,
# ioredis and node-redis tests connect with), then runs one test program per client:
# test_redis_cli.sh (redis-cli), test_redis_py.py (/usr/bin/python3, Debian's python3-redis),
# test_ioredis.js twice (ioredis 5, RESP2; ioredis 6, RESP3), test_node_redis.js twice
# (node-redis 5, RESP2; node-redis 6, RESP3), test_redis_rb.rb (Debian's ruby-redis),
# test_redis_perl.pl (Debian's libredis-perl), test_phpredis.php and test_predis.php (Debian's
# php-redis and php-predis), test_redigo.go (Debian's redigo, built offline) and test_hiredis.c
# (Debian's libhiredis-dev) and TestJedis.java (Jedis built from tests/clients/java). The npm packages
# are installed from package-lock.json into tests/clients/node_modules when missing or stale; the
# Debian packages come from scripts/bootstrap. Blocked consumers in one client are woken by
# publishes from another. Stops its servers on exit. Prints a summary line per client and a final
# "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deferq_bin=${1:?usage: run_clients.sh /path/to/deferq}
[[ -x $deferq_bin ]] || { echo "$deferq_bin is not executable" >&2; exit 2; }
for tool in redis-server redis-cli node npm /usr/bin/python3 ruby perl php go cc java javac; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 2; }
done

# shellcheck source=scripts/lib/servers.sh
source "$here/../../scripts/lib/servers.sh"
servers_init clients


start_server redis redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
redis_port=$started_port
start_server deferq "$deferq_bin" --threads 2 --pool "default=redis://127.0.0.1:$redis_port"
port=$started_port
# Job commands answer TRYAGAIN until deferq's pool connections are up.
for ((i = 0; i < 100; i++)); do
  [[ $(redis-cli -p "$port" QSTAT startup-probe 2>&1 | head -1) == ready ]] && break
  sleep 0.05
done

# A second deferq with auth.required = true, for the URL-authenticated clients
# (redis://namespace:token@host:port): a namespace and a token made through the admin connection.
start_deferq_auth deferq-auth "$deferq_bin" --threads 2 --pool "default=redis://127.0.0.1:$redis_port"
auth_port=$started_port
auth_ns="clients-$RANDOM"
auth_token=$(namespace_token "$auth_port" "$auth_ns")
export DEFERQ_AUTH_URL="redis://$auth_ns:$auth_token@127.0.0.1:$auth_port"

status=0
results=()

summary() {  # summary NAME LOGFILE: the "N passed, M failed" line of a test program
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$2" | tail -1 || true)
  if [[ -z $line ]]; then
    results+=("$1:0:1")
  else
    results+=("$1:$(awk '{ print $1 ":" $3 }' <<<"$line")")
  fi
}

# run_client NAME VERSION COMMAND...: runs one client's test program against deferq (its port in
# DEFERQ_PORT), at most 150 s, and records its summary line.
run_client() {
  local name=$1 version=$2
  shift 2
  echo
  echo "== $name ($version)"
  DEFERQ_PORT=$port timeout 150 "$@" 2>&1 | tee "$workdir/$name.out" || status=1
  summary "$name" "$workdir/$name.out"
}

run_client redis-cli "$(redis-cli --version)" bash "$here/test_redis_cli.sh"
run_client redis-py "$(/usr/bin/python3 -c 'import redis; print(redis.__version__)')" \
  /usr/bin/python3 "$here/test_redis_py.py"

# npm packages of package.json (ioredis 5 and 6 under aliases, node-redis), as the lock file pins
# them; installed again when package-lock.json changed since the last install.
if ! cmp -s "$here/package-lock.json" "$here/node_modules/.deferq-installed-lock.json"; then
  echo "installing the npm packages of package-lock.json into $here/node_modules"
  npm ci --no-audit --no-fund --prefix "$here" >&2
  cp "$here/package-lock.json" "$here/node_modules/.deferq-installed-lock.json"
fi
npm_version() { node -p "require('$here/node_modules/$1/package.json').version"; }
for pkg in ioredis5 ioredis6; do
  IOREDIS=$pkg run_client "$pkg" "ioredis $(npm_version "$pkg")" node "$here/test_ioredis.js"
done
for pkg in redis5 redis; do
  NODE_REDIS=$pkg run_client "node-$pkg" "redis $(npm_version "$pkg")" node "$here/test_node_redis.js"
done

run_client redis-rb "$(ruby -e 'require "redis"; print "redis-rb #{Redis::VERSION}, ruby #{RUBY_VERSION}"')" \
  ruby "$here/test_redis_rb.rb"
run_client redis-perl "Redis.pm $(perl -MRedis -e 'print $Redis::VERSION'), perl $(perl -e 'printf "%vd", $^V')" \
  perl "$here/test_redis_perl.pl"
run_client phpredis "phpredis $(php -r 'echo phpversion("redis");'), php $(php -r 'echo PHP_VERSION;')" \
  php "$here/test_phpredis.php"
run_client Predis "$(php -r 'require "Predis/Autoloader.php"; Predis\Autoloader::register();
  echo "Predis ", Predis\Client::VERSION;')" php "$here/test_predis.php"

# build_then_run NAME VERSION BINARY BUILD-COMMAND...: builds a compiled client's test program
# into BINARY, then runs it; a failed build counts as a failure.
build_then_run() {
  local name=$1 version=$2 binary=$3
  shift 3
  echo
  echo "building $binary"
  if "$@" >&2; then
    run_client "$name" "$version" "$binary"
  else
    status=1
    results+=("$name:0:1")
  fi
}

# redigo from Debian's package, built offline from /usr/share/gocode (no module download).
build_then_run redigo \
  "redigo $(dpkg-query -W -f='${Version}' golang-github-gomodule-redigo-dev), $(go version | cut -d' ' -f3)" \
  "$workdir/test_redigo" \
  env GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS= GOCACHE="${TMPDIR:-/tmp}/deferq-gocache" \
  go build -o "$workdir/test_redigo" "$here/test_redigo.go"

# Jedis built from its vendored source (tests/clients/java/README.md says why and what) with
# Debian's jars for its dependencies; javac -sourcepath compiles only the classes the test reaches.
jedis_version=5.2.0
jedis_jars=$(printf '/usr/share/java/%s.jar:' commons-pool2 slf4j-api slf4j-nop gson com.android.json)
build_jedis() {
  (cd "$here/java" && sha256sum --quiet -c <<<"2b4625958dec081e55a44566d0db565eff9ca7914435400e2d768abcd2ee8152  jedis-$jedis_version-src.tar.xz") &&
    tar -xJf "$here/java/jedis-$jedis_version-src.tar.xz" -C "$workdir" &&
    javac -nowarn -encoding UTF-8 -d "$workdir/jedis-classes" -cp "$jedis_jars" \
      -sourcepath "$workdir/jedis-$jedis_version/src/main/java" "$here/TestJedis.java" &&
    printf '#!/bin/sh\nexec java -cp "%s" TestJedis\n' "$workdir/jedis-classes:$jedis_jars" \
      >"$workdir/test_jedis" && chmod +x "$workdir/test_jedis"
}
build_then_run jedis "Jedis $jedis_version, $(javac -version 2>&1)" "$workdir/test_jedis" build_jedis

build_then_run hiredis "hiredis $(dpkg-query -W -f='${Version}' libhiredis-dev)" "$workdir/test_hiredis" \
  cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O1 -o "$workdir/test_hiredis" \
  "$here/test_hiredis.c" -lhiredis

echo
passed=0
failed=0
for r in "${results[@]}"; do
  IFS=: read -r name p f <<<"$r"
  printf '%-11s %3d passed, %d failed\n' "$name" "$p" "$f"
  passed=$((passed + p))
  failed=$((failed + f))
done
((failed == 0)) || status=1
echo "$passed passed, $failed failed"
exit "$status"
