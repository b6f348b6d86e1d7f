# Software tag matcher: a plain data structure, no UCX or device dependency.
noinst_LTLIBRARIES += src/matcher/libtm_matcher.la
src_matcher_libtm_matcher_la_SOURCES = \
	src/matcher/tag_matcher.h \
	src/matcher/tag_matcher.c
