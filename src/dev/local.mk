# Device interface and backend registry; backends append their sources.
noinst_LTLIBRARIES += src/dev/libtm_dev.la
src_dev_libtm_dev_la_SOURCES = src/dev/tm_dev.h src/dev/tm_dev.c
src_dev_libtm_dev_la_LIBADD  = $(VERBS_LIBS)
