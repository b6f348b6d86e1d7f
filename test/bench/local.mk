# Microbenchmarks (built with 'make', run by hand; see docs/matcher.md).
noinst_PROGRAMS += test/bench/matcher_bench
test_bench_matcher_bench_SOURCES = test/bench/matcher_bench.c
test_bench_matcher_bench_LDADD   = src/matcher/libtm_matcher.la
EXTRA_DIST += test/bench/perftest_compare.py
