#!/bin/sh
# A C compiler for the cache tests: clang itself, but every module compile (the toolchain
# probes, with -### or --version, pass straight through) is logged to $KILN_TEST_CC_LOG as
# "start PID TIME" / "end PID TIME", and delayed by $KILN_TEST_CC_SLEEP seconds if set.
case " $* " in
  *" -### "* | *" --version "* | *" -Q "*) exec clang "$@" ;;
esac
[ -n "$KILN_TEST_CC_LOG" ] && echo "start $$ $(date +%s.%N)" >> "$KILN_TEST_CC_LOG"
[ -n "$KILN_TEST_CC_SLEEP" ] && sleep "$KILN_TEST_CC_SLEEP"
clang "$@"
rc=$?
[ -n "$KILN_TEST_CC_LOG" ] && echo "end $$ $(date +%s.%N)" >> "$KILN_TEST_CC_LOG"
exit $rc
