# Sourced by install.sh: a first build of the test bed spends minutes installing and importing vLLM without a word,
# and a terminal that shows nothing for that long looks hung. Kept out of lib.sh, whose hash keys every cached venv:
# how a build reports its progress changes nothing in the venv it builds.

# Runs "${@:3}" and, every $1 seconds while it runs, says that it is still $2.
with_heartbeat() {
    local every="$1" what="$2" started=$SECONDS status=0
    shift 2
    (while sleep "$every"; do echo "  ... still $what ($((SECONDS - started)) s so far)"; done) &
    local beat=$!
    "$@" || status=$?
    kill "$beat" 2>/dev/null || true
    wait "$beat" 2>/dev/null || true
    return "$status"
}
