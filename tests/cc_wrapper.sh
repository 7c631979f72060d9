#!/bin/sh
# A C compiler for the cache tests: clang itself, but every module compile (the toolchain
# probes, with -### or --version, pass straight through) is logged to $KILN_TEST_CC_LOG as
# "start PID" / "end PID". Synchronisation is explicit, never a sleep:
#   KILN_TEST_CC_BARRIER=N     wait (at most 60 s, then fail loudly) until N compiles have
#                              started: only compiles that run at the same time pass it
#   KILN_TEST_CC_STARTED=FIFO  write "start" to FIFO once the compile has begun
#   KILN_TEST_CC_HOLD=FIFO     then block reading FIFO (the test kills the compile meanwhile)
# KILN_TEST_CC_PROBE_LOG=FILE gets one "probe PID" line per toolchain probe.
case " $* " in
  *" -### "* | *" --version "* | *" -Q "*)
    [ -n "$KILN_TEST_CC_PROBE_LOG" ] && echo "probe $$" >> "$KILN_TEST_CC_PROBE_LOG"
    exec clang "$@" ;;
esac
[ -n "$KILN_TEST_CC_LOG" ] && echo "start $$" >> "$KILN_TEST_CC_LOG"
if [ -n "$KILN_TEST_CC_BARRIER" ]; then
  tries=0
  while [ "$(grep -c '^start' "$KILN_TEST_CC_LOG")" -lt "$KILN_TEST_CC_BARRIER" ]; do
    tries=$((tries + 1))
    if [ $tries -gt 600 ]; then
      echo "barrier $$: only $(grep -c '^start' "$KILN_TEST_CC_LOG") of $KILN_TEST_CC_BARRIER compiles started" >> "$KILN_TEST_CC_LOG"
      exit 1
    fi
    sleep 0.1
  done
fi
[ -n "$KILN_TEST_CC_STARTED" ] && echo start > "$KILN_TEST_CC_STARTED"
[ -n "$KILN_TEST_CC_HOLD" ] && read -r _ < "$KILN_TEST_CC_HOLD"
clang "$@"
rc=$?
[ -n "$KILN_TEST_CC_LOG" ] && echo "end $$" >> "$KILN_TEST_CC_LOG"
exit $rc
